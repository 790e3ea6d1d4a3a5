#!/usr/bin/env python
"""The HF copy's pass over banked branches: one question a pass (how lover_vllm's copy read them before) against
passes shared by several questions (`questions_features`, branches side by side on their own prompts, grouped by
`pass_is_full`; how the pipeline reads them now), on the same questions in one run.

Both compute what the pipeline needs of a question without a KV cache: features at the given layers, token
statistics and margins (stats=True, margins=True, as for vLLM's branches). Reports tokens/s (prompt and branch tokens
run through the model) for each, after one untimed call of each, and the largest difference between their features
(rows padded to other widths: float rounding only). On a CPU a shared pass mostly saves per-pass overheads; on a GPU it
fills the batch that one question's N rows leave idle (run 30 reads that on a card).

    .venv/bin/python -m benchmarks.performance.bench_shared_pass --task lover_gsm8k \
      --bank benchmarks/banks/qwen2.5-coder-0.5b-instruct/lover_gsm8k-test.jsonl.gz --docs 0:24 \
      --out benchmarks/results/bench_shared_pass.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from lover_lmeval.core.decode.engine import Decoded
from lover_lmeval.core.decode.features import questions_features
from lover_lmeval.core.store.complete import PASS_CONTEXT
from lover_lmeval.core.store.complete import pass_is_full
from lover_lmeval.core.files import write_text

from benchmarks.bench_common import add_question_options, banked_questions


def shared_groups(questions: list, n_branches: int) -> list[list]:
    """Consecutive questions, a group closed as the pipeline closes one (store/complete.py: pass_is_full)."""
    groups, group = [], []
    for prompt, branches in questions:
        group.append((prompt, branches))
        if pass_is_full([(p, Decoded(0, b)) for p, b in group], n_branches, PASS_CONTEXT):
            groups.append(group)
            group = []
    return groups + [group] if group else groups


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_question_options(parser, docs="0:24")
    parser.add_argument("--bank", required=True, help="the bank holding these questions' branches")
    parser.add_argument("--layers", default="12")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    lm, prompts, keys, layers = banked_questions(args)
    pipeline = lm.pipeline
    questions = [(p, pipeline.bank.get(k)) for p, k in zip(prompts, keys)]
    tokens = sum(len(p) + sum(len(b.token_ids) for b in branches) for p, branches in questions)
    ways = {"one question a pass": [[q] for q in questions],
            "shared passes": shared_groups(questions, pipeline.config.decoding.n_branches)}
    run = lambda group: questions_features(lm.model, group, pipeline.template_ids, layers, stats=True,  # noqa: E731
                                           margins=True)
    for groups in ways.values():  # warm-up, untimed
        run(groups[0])
    seconds, features = {}, {}
    for name, groups in ways.items():
        began = time.perf_counter()
        features[name] = [f for group in groups for f, _ in run(group)]  # (N, T, L, D) each
        seconds[name] = time.perf_counter() - began
    diff = max(float((a - b).abs().max()) for a, b in zip(*features.values()))
    report = {"command": " ".join(sys.argv), "machine": f"{platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads",
              "load_average": os.getloadavg(), "args": vars(args), "n_questions": len(questions), "tokens": tokens,
              "passes": {name: len(groups) for name, groups in ways.items()},
              "seconds": {k: round(v, 2) for k, v in seconds.items()},
              "tokens_per_second": {k: round(tokens / v, 1) for k, v in seconds.items()},
              "speedup": round(seconds["one question a pass"] / seconds["shared passes"], 2),
              "max_abs_feature_difference": diff}
    write_text(Path(args.out), json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
