"""Do `lover_vllm` and `lover_hf` agree? Their branches and every selector's accuracy on the same questions.

Reads two `lm_eval ... --log_samples` output folders of the same task and questions, one per engine (each run with
`bank=PATH` too), and their banks: the share of branches that are token-identical (matched by prompt, since the bank
keys name the engine), and per selector row the accuracy under each engine with the 95% paired bootstrap interval of
the difference (vLLM minus HF), paired by question. bf16 branches are not expected to be token-identical (near-ties
flip); the rows are expected to lie within their intervals of each other.

    python -m benchmarks.performance.engines_agreement --task lover_gsm8k --hf OUT_HF --hf-bank BANK_HF \\
        --vllm OUT_VLLM --vllm-bank BANK_VLLM --out benchmarks/results/engines_agreement.json
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import numpy as np

from lover_lmeval.core.stats import paired_bootstrap
from lover_lmeval.core.store.bank_store import open_store


def per_question(folder: str, task: str) -> dict[str, dict[int, float]]:
    """row -> doc_id -> exact match, from lm-eval's samples file (one entry per filter and document)."""
    (path,) = glob.glob(str(Path(folder) / "*" / f"samples_{task}_*.jsonl"))
    rows: dict[str, dict[int, float]] = {}
    for sample in map(json.loads, open(path)):
        rows.setdefault(sample["filter"], {})[int(sample["doc_id"])] = float(sample["exact_match"])
    return rows


def branches_by_prompt(bank: str) -> dict[tuple[int, ...], list[list[int]]]:
    """prompt ids -> the token ids of each of its branches, from a bank's records."""
    return {tuple(r["prompt_ids"]): [b["token_ids"] for b in r["branches"]] for r in open_store(Path(bank)).records()}


def agreement(hf: dict, vllm: dict, hf_bank: str, vllm_bank: str, n_boot: int = 10_000) -> dict:
    ours, theirs = branches_by_prompt(hf_bank), branches_by_prompt(vllm_bank)
    prompts = sorted(set(ours) & set(theirs))
    pairs = [(a, b) for p in prompts for a, b in zip(ours[p], theirs[p])]
    report = {"questions_both_banked": len(prompts), "branches": len(pairs),
              "token_identical": sum(a == b for a, b in pairs), "rows": {}}
    rng = np.random.default_rng(0)
    for row in sorted(set(hf) & set(vllm)):
        docs = sorted(set(hf[row]) & set(vllm[row]))
        a, b = np.array([vllm[row][d] for d in docs]), np.array([hf[row][d] for d in docs])
        diff = paired_bootstrap(a, b, n_boot, rng)
        report["rows"][row] = {"n": len(docs), "vllm": float(a.mean()), "hf": float(b.mean()),
                               "diff": diff["diff"], "low": diff["low"], "high": diff["high"]}
    return report


def markdown(report: dict) -> str:
    lines = [f"{report['token_identical']} of {report['branches']} branches token-identical "
             f"({report['questions_both_banked']} questions in both banks)", "",
             "| row | n | lover_vllm | lover_hf | vLLM − HF [95% paired] |", "|---|---|---|---|---|"]
    for row, cell in report["rows"].items():
        lines.append(f"| `{row}` | {cell['n']} | {cell['vllm']:.3f} | {cell['hf']:.3f} | {cell['diff']:+.3f} "
                     f"[{cell['low']:+.3f}, {cell['high']:+.3f}] |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="lover_gsm8k")
    for engine in ("hf", "vllm"):
        parser.add_argument(f"--{engine}", required=True, help=f"lm_eval --output_path of the {engine} run")
        parser.add_argument(f"--{engine}-bank", required=True, help=f"the bank of the {engine} run")
    parser.add_argument("--out", required=True, help="JSON path (a .md beside it)")
    args = parser.parse_args(argv)
    report = agreement(per_question(args.hf, args.task), per_question(args.vllm, args.task), args.hf_bank,
                       args.vllm_bank)
    out = Path(args.out)
    out.write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
