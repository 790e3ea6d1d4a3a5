#!/usr/bin/env python
"""Cost of cutting one branch (`make_branch`: its text at the first stop string, each token's character span) by the
branch's length: the one-pass offsets (`branch.token_ends`) against the prefix rule they replaced, every prefix
decoded (tests/test_branch_offsets.py's `_make_branch_reference`, the old function; quadratic, so only up to
--old-max tokens).

Two kinds of branch, in the tokenizer's own ids: `random`, drawn uniformly (seeded) from the whole vocabulary, special
tokens and byte pieces included; `text`, the ids of real text (the first question's branch texts in the committed
SmolLM2 GSM8K bank, then a line of CJK, an emoji and accents) tiled to the length. The cuts of every length are
alternated --repeats times, so that drift in the machine's speed falls on all of them, and the fastest kept, in CPU
time (this process's: on a shared CPU the other jobs do not count, while wall time grows with the load) and in wall
time; also per 1,000 tokens. The slope of log time against log length says linear (1) or quadratic (2). Where both
rules run, their branches must be equal. Issue "Costs that grow" (item 1) asks ≤ 10 ms per 1,000 tokens at every
length up to 32k. Writes benchmarks/results/bench_cut_<model>_<date>.json (and .md):

    .venv/bin/python -m benchmarks.performance.bench_cut
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np
import tokenizers
import transformers
from transformers import AutoTokenizer

from benchmarks.bench_common import BANKS, RESULTS, UNTIL, add_model_options, model_file, offline_env
from lover_lmeval.core.decode.branch import make_branch
from lover_lmeval.core.files import write_text
from lover_lmeval.core.loading import convert_gguf, default_gguf
from lover_lmeval.core.store.bank import BranchBank
from tests.test_branch_offsets import _make_branch_reference

LENGTHS = [256, 1024, 2048, 4096, 8192, 16384, 32768]
TEXT_BANK = BANKS / "smollm2-135m-instruct" / "lover_gsm8k-test.jsonl.gz"
RULES = {"one_pass": make_branch, "prefix_rule": _make_branch_reference}


def text_ids(tokenizer) -> list[int]:
    """Real text's ids, to tile: the first question's branch texts in TEXT_BANK, then CJK, an emoji and accents."""
    bank = BranchBank(TEXT_BANK)
    texts = [b.text for b in bank.get(min(bank.keys()))] + ["世界 🎉 naïve café"]
    return tokenizer.encode("\n\n".join(texts), add_special_tokens=False)


def branch_ids(tokenizer, kind: str, n: int, text: list[int]) -> list[int]:
    if kind == "random":
        return random.Random(n).choices(range(len(tokenizer)), k=n)
    return (text * (n // len(text) + 1))[:n]


def timed(cut, tokenizer, ids: list[int]) -> tuple[float, float, object]:
    """(CPU seconds, wall seconds, branch) of one cut of `ids` as a branch ended by its length."""
    cpu, wall = time.process_time(), time.perf_counter()
    branch = cut(tokenizer, ids, [0.0] * len(ids), UNTIL, "length")
    return time.process_time() - cpu, time.perf_counter() - wall, branch


def slope(rows: list[dict], key: str) -> float | None:
    """Least-squares slope of log seconds (`key`) against log tokens."""
    points = [(r["tokens"], r[key]) for r in rows if r.get(key) is not None]
    if len(points) < 2:
        return None
    return round(float(np.polyfit(*np.log(np.array(points)).T, 1)[0]), 3)


def markdown(report: dict) -> str:
    lines = ["| branch | tokens | prefix rule ms | one pass ms | prefix rule ms / 1k tokens | one pass ms / 1k tokens "
             "| one pass ms / 1k tokens, wall | speed-up |", "|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        old, new, n = r.get("prefix_rule_cpu_s"), r["one_pass_cpu_s"], r["tokens"]
        cells = ["-"] * 3 if old is None else [f"{1e3 * old:.1f}", f"{1e6 * old / n:.1f}", f"{old / new:.0f}×"]
        lines.append(f"| {r['kind']} | {n:,} | {cells[0]} | {1e3 * new:.2f} | {cells[1]} | {1e6 * new / n:.2f} "
                     f"| {1e6 * r['one_pass_wall_s'] / n:.2f} | {cells[2]} |")
    lines += ["", "CPU time unless said: the fastest of each length's alternated cuts.", "",
              "| branch | slope, prefix rule | slope, one pass | slope, one pass, wall |", "|---|---|---|---|"]
    lines += [f"| {kind} | {s['prefix_rule_cpu_s']} | {s['one_pass_cpu_s']} | {s['one_pass_wall_s']} |"
              for kind, s in report["slopes"].items()]
    worst = report["worst_one_pass_ms_per_1k"]
    lines += ["", f"Worst one-pass cost per 1,000 tokens: {worst['cpu']:.2f} ms CPU, {worst['wall']:.2f} ms wall "
              f"(target ≤ 10: {'met' if max(worst.values()) <= 10 else 'NOT met'}); branches equal wherever both "
              f"rules ran: {report['equal_where_both_ran']}."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_options(parser, model=None, dtype=None, model_default="the embedded SmolLM2-135M-Instruct")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="branch lengths in tokens")
    parser.add_argument("--old-max", type=int, default=4096, help="longest branch the prefix rule is timed on")
    parser.add_argument("--repeats", type=int, default=3, help="alternated rounds of cuts, the fastest kept")
    parser.add_argument("--out", default=None, help="JSON path (default benchmarks/results/bench_cut_<model>_<date>"
                                                    ".json; a .md beside it)")
    args = parser.parse_args()
    offline_env()
    gguf = Path(args.gguf or (model_file(args.model) if args.model else default_gguf()))
    model = args.model or ("smollm2-135m-instruct" if not args.gguf else gguf.stem)
    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(gguf))
    started = datetime.datetime.now()
    text = text_ids(tokenizer)
    rows = [{"kind": kind, "tokens": n} for kind in ("random", "text") for n in map(int, args.lengths.split(","))]
    cases = [branch_ids(tokenizer, r["kind"], r["tokens"], text) for r in rows]
    equal = True
    for repeat in range(args.repeats):
        for row, ids in zip(rows, cases):
            rules = [rule for rule in RULES if rule == "one_pass" or row["tokens"] <= args.old_max]
            branches = []
            for rule in rules:
                cpu, wall, branch = timed(RULES[rule], tokenizer, ids)
                row[f"{rule}_cpu_s"] = min(cpu, row.get(f"{rule}_cpu_s", cpu))
                row[f"{rule}_wall_s"] = min(wall, row.get(f"{rule}_wall_s", wall))
                branches.append(branch)
            equal = equal and all(b == branches[0] for b in branches)
            print(f"[bench_cut] round {repeat + 1}/{args.repeats}, {row['kind']} {row['tokens']}: "
                  + ", ".join(f"{rule} {1e3 * row[f'{rule}_cpu_s']:.2f} ms" for rule in rules), flush=True)
    report = {
        "benchmark": "bench_cut", "date": started.isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, "-m", "benchmarks.performance.bench_cut", *sys.argv[1:]]),
        "model": model, "gguf": gguf.name, "repeats": args.repeats,
        "machine": {"nproc": os.cpu_count(), "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                    "python": platform.python_version(), "transformers": transformers.__version__,
                    "tokenizers": tokenizers.__version__, "platform": platform.platform()},
        "rows": rows,
        "slopes": {kind: {key: slope([r for r in rows if r["kind"] == kind], key)
                          for key in ("prefix_rule_cpu_s", "one_pass_cpu_s", "one_pass_wall_s")}
                   for kind in ("random", "text")},
        "worst_one_pass_ms_per_1k": {clock: max(1e6 * r[f"one_pass_{clock}_s"] / r["tokens"] for r in rows)
                                     for clock in ("cpu", "wall")},
        "equal_where_both_ran": equal,
    }
    report["markdown"] = markdown(report)
    out = Path(args.out) if args.out else RESULTS / f"bench_cut_{model}_{started.date()}.json"
    write_text(out, json.dumps(report, indent=1) + "\n")
    write_text(out.with_suffix(".md"), f"`{report['command']}`\n\n{report['markdown']}\n")
    print(report["markdown"])
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
