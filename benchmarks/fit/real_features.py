"""LoVer on real Qwen2.5-Coder-0.5B features, from the already-decoded branches in ../shared/samples.

The shared file holds CoT-decoding branches (top-10 first tokens, then greedy, 256 tokens) for the first
GSM8K test questions. We re-tokenize each branch, compute assertion features at several layers with
`features_from_tokens` (one prefill per question, no decoding), fit the verifier label-free on these
questions' own branches (the test-time fit of `verifier=fit`), and compare selection strategies.
Gold answers are used only to score, never to fit or choose anything.

    python -m benchmarks.fit.real_features --layers 6,12,18 --out benchmarks/results/real_features.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from lover_lmeval.core.select.answers import normalise_number
from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.decode.features import FALSE_TEMPLATE, TRUE_TEMPLATE, features_from_tokens
from lover_lmeval.core.results import LoverResult
from lover_lmeval.core.verify.scoring import batch_results, fit_on_results
from lover_lmeval.core.verify.verifier import VerifierConfig
from lover_lmeval.harness.filter import LoverSelect

from benchmarks.bench_common import SHARED, add_model_options, load_model

PROMPT_SUFFIX = "\nLet's think step by step and end with 'The answer is N.'"  # as in shared/samples/README.md


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return float(((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_options(parser, dtype=None)  # the samples' model, in float32
    parser.add_argument("--samples", default=str(SHARED / "samples/qwen2.5-coder-0.5b-gsm8k-cot10.jsonl"))
    parser.add_argument("--layers", default="6,12,18")
    parser.add_argument("--normalize", default="mean,meanstd,none")
    parser.add_argument("--out", default="benchmarks/results/real_features.json")
    args = parser.parse_args()

    model, tokenizer, _ = load_model(args.model, "float32", args.gguf)
    rows = [json.loads(line) for line in open(args.samples)]
    layers = [int(x) for x in args.layers.split(",")]
    templates = [tokenizer.encode(t, add_special_tokens=False) for t in (TRUE_TEMPLATE, FALSE_TEMPLATE)]
    questions = [json.loads(line)["question"] for line in open(SHARED / "data/gsm8k/test.jsonl")]

    start = time.time()
    per_layer = {layer: [] for layer in layers}
    for row in rows:
        messages = [{"role": "user", "content": questions[row["test_index"]] + PROMPT_SUFFIX}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        prompt = list(prompt["input_ids"]) if isinstance(prompt, dict) or hasattr(prompt, "keys") else list(prompt)
        branches = [Branch(t, tokenizer.encode(t, add_special_tokens=False), [], [], "length") for t in row["branches"]]
        hidden = features_from_tokens(model, prompt, branches, templates, layers)  # (N, 2, L, D)
        for i, layer in enumerate(layers):
            per_layer[layer].append(LoverResult(branches, hidden[:, :, i].numpy(), None, layer))
    featurize_s = time.time() - start

    golds = [normalise_number(r["gold"]) for r in rows]
    report = {"model": "qwen2.5-coder-0.5b-instruct (Q4_K_M GGUF, fp32 CPU)", "n_questions": len(rows),
              "n_branches": len(rows[0]["branches"]), "featurize_seconds": round(featurize_s, 1),
              "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads", "runs": []}

    def accuracy(strategy, results, verifier="lover"):
        picked = LoverSelect(strategy=strategy, extract="number", verifier=verifier, gold="gold").apply(
            [[r] for r in results], [{"gold": g} for g in golds])
        return float(np.mean([p[0] == g for p, g in zip(picked, golds)]))

    base = per_layer[layers[0]]
    report["baselines"] = {s: accuracy(s, base) for s in ("greedy", "majority")}
    report["baselines"]["pass_at_n"] = accuracy("pass_at_n", base)
    for layer in layers:
        for normalize in args.normalize.split(","):
            results = per_layer[layer]
            fit_start = time.time()
            fit_on_results(results, "number", VerifierConfig(normalize=normalize))
            _, mask, _, answers = batch_results(results, "number")
            scores = np.concatenate([r.scores() for r in results])
            correct = np.array([a == g for row, g in zip(answers, golds) for a in row], dtype=int)
            run = {"layer": layer, "normalize": normalize, "fit_seconds": round(time.time() - fit_start, 2),
                   "lover_max": accuracy("lover_max", results), "lover_sum": accuracy("lover_sum", results),
                   "auroc_p_vs_correct": round(auroc(scores, correct), 3)}
            report["runs"].append(run)
            print(json.dumps(run))
    print(json.dumps(report["baselines"]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
