#!/usr/bin/env python
"""Features of banked branches: one padded pass with logits (the implementation before length buckets) against
`features_from_tokens` (length buckets; no LM head at the last layer), on the same questions in one run.

Both compute phi(x+/-) of every branch of a question from its tokens (a bank holds no KV cache). The old way ran
all N branches in one pass padded to the longest, and at the last layer the whole model, LM head included (the
template passes after it are today's in both, so the old cost is understated there). Reports
seconds per question for each (after one untimed call of each on the first question, so neither pays the
start-up costs) and the largest difference between their features (batch shapes differ, so fp32 rounding may too).

    .venv/bin/python -m benchmarks.performance.bench_features --task lover_bbh_navigate \
      --bank benchmarks/banks/qwen2.5-coder-0.5b-instruct/lover_bbh_navigate.jsonl.gz --docs 0:8 --layers 12,24 \
      --out benchmarks/results/bench_features_navigate.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from lover_lmeval.core.decode.features import assertion_features, features_from_tokens
from lover_lmeval.core.files import write_text
from lover_lmeval.core.decode.kv import cache_of, extend_with_tokens, input_device, snapshot

from benchmarks.bench_common import add_question_options, banked_questions


@torch.inference_mode()
def one_padded_pass(model, prompt_ids, branches, template_ids, layers):
    """The previous `features_from_tokens`: every branch in one pass, the full model (logits) at the last layer."""
    prefill = model(input_ids=torch.tensor([prompt_ids], device=input_device(model)), use_cache=True,
                    logits_to_keep=1)
    base = snapshot(cache_of(prefill), 0, len(prompt_ids))
    if not any(b.token_ids for b in branches):
        return assertion_features(model, branches, [base] * len(branches), template_ids, layers)
    upto = max(layers)
    full = upto >= model.config.num_hidden_layers  # then: the old whole-model call, LM head over every position
    out, _ = extend_with_tokens(model, [base] * len(branches), [b.token_ids for b in branches],
                                upto_layer=None if full else upto)
    caches = [snapshot(cache_of(out), k, len(prompt_ids), end=base.length + len(b.token_ids),
                       n_blocks=None if full else upto) for k, b in enumerate(branches)]
    return assertion_features(model, branches, caches, template_ids, layers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_question_options(parser, docs="0:8")
    parser.add_argument("--bank", required=True, help="the bank holding these questions' branches")
    parser.add_argument("--layers", default="12,24")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    lm, prompts, keys, layers = banked_questions(args)
    pipeline = lm.pipeline
    for run in (one_padded_pass, features_from_tokens):  # warm-up, untimed
        run(lm.model, prompts[0], pipeline.bank.get(keys[0]), pipeline.template_ids, layers)
    seconds, diffs, tokens = {"one padded pass": 0.0, "length buckets": 0.0}, [], []
    for prompt, key in zip(prompts, keys):
        branches = pipeline.bank.get(key)
        tokens.append(sum(len(b.token_ids) for b in branches))
        computed = {}
        for name, run in (("one padded pass", one_padded_pass), ("length buckets", features_from_tokens)):
            began = time.perf_counter()
            computed[name] = run(lm.model, prompt, branches, pipeline.template_ids, layers)  # (N, T, L, D)
            seconds[name] += time.perf_counter() - began
        diffs.append(float((computed["one padded pass"] - computed["length buckets"]).abs().max()))
    n = len(prompts)
    report = {"args": vars(args), "n_questions": n, "branch_tokens_per_question": sum(tokens) / n,
              "seconds_per_question": {k: round(v / n, 2) for k, v in seconds.items()},
              "speedup": round(seconds["one padded pass"] / seconds["length buckets"], 2),
              "max_abs_feature_difference": max(diffs)}
    write_text(Path(args.out), json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
