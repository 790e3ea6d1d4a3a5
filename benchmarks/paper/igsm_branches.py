"""What the banked iGSM branches are: right vs wrong by length, finish reason and answer value (no model run).

Gold answers come from our own generator (`lover_tasks.load_igsm`'s test problems), matched to each banked question by
its text inside the decoded prompt. Used by run 8 (benchmarks/runs/run08_gpu_igsm_mmlu_pro_bbh_full.md) to explain why
every selector is near chance on iGSM with Qwen2.5-Coder-0.5B.

    python -m benchmarks.paper.igsm_branches --gguf $(../shared/bin/get-model qwen2.5-coder-0.5b-instruct | tail -1) \
      --bank benchmarks/banks/qwen2.5-coder-0.5b-instruct/lover_igsm-test.jsonl.gz \
      --out benchmarks/results/paper_qwen2.5-coder-0.5b-instruct/gpu_run8/igsm/branches.json
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
from pathlib import Path

import numpy as np

from lover_lmeval.apps.diagnostics import answer_right
from lover_lmeval.core.select.answers import extract_number
from lover_lmeval.core.loading import convert_gguf
from lover_lmeval.data.tasks import load_igsm

from benchmarks.bench_common import add_model_options, model_path

OPS = (2, 4, 8, 16)
SHORT_TOKENS = 5  # a bare number ("12", "The answer is 7.") and no working


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_options(parser, dtype=None)  # the model the bank was decoded with (for its tokenizer)
    parser.add_argument("--bank", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(Path(model_path(args))))
    gold = {d["question"].strip(): d["target"] for op in OPS for d in load_igsm(max_op=op)["test"]}
    right, tokens, cut, values, golds = [], [], [], collections.Counter(), collections.Counter()
    for line in gzip.open(args.bank, "rt"):
        record = json.loads(line)
        prompt = tokenizer.decode(record["prompt_ids"])
        matches = [q for q in gold if q in prompt]
        if len(matches) != 1:
            raise ValueError(f"a banked prompt matches {len(matches)} iGSM test questions; is {args.bank} an iGSM bank?")
        target = gold[matches[0]]
        golds[target] += 1
        for branch in record["branches"]:
            answer = extract_number(branch["text"])
            values[answer.value if answer else None] += 1
            right.append(answer_right(answer, target))
            tokens.append(len(branch["token_ids"]))
            cut.append(branch["finish_reason"] == "length")
    right, tokens, cut = np.array(right), np.array(tokens), np.array(cut)
    short = tokens <= SHORT_TOKENS
    report = {
        "bank": str(args.bank), "questions": sum(golds.values()), "branches": len(right),
        "right_branches": int(right.sum()), "right_share": float(right.mean()),
        "share_short": float(short.mean()), "right_share_short": float(right[short].mean()),
        "right_share_long": float(right[~short].mean()),
        "median_tokens_right_wrong": [float(np.median(tokens[right])), float(np.median(tokens[~right]))],
        "share_length_cut_right_wrong": [float(cut[right].mean()), float(cut[~right].mean())],
        "top_branch_answers": {str(v): c for v, c in values.most_common(10)},
        "top_gold_answers": dict(golds.most_common(10)),
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
