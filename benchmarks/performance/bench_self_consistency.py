#!/usr/bin/env python
"""lm-eval's own `gsm8k_cot_self_consistency` (`repeats: 64`, sampled, rows `score-first`, `maj@64`, `maj@8`) through
`lover_hf` and through lm-eval's `hf`, the same model and settings, wall time of each `lm_eval` command.

lm-eval's `hf` runs the 8-shot prompt 64 times, one request per repeat; `lover_hf` decodes the question once with
N = 64 branches (harness/repeats.py: one prefill of the prompt shared by the branches) and adds every selector's
row. *Any task*'s target: `lover_hf` ≤ 0.35 × `hf`'s wall time. The two commands alternate `--repeats` times (drift in
the machine's speed falls on both) and each one's fastest run is kept; the ratio is taken within this one run. Both
load the embedded SmolLM2-135M-Instruct in float32 (lover_hf's default; `hf` reads the converted folder with
`dtype=float32`), the task as lm-eval ships it with only its data pointed at ../shared/data (tests/stock_yaml.py).
Writes benchmarks/results/self_consistency.json and .md:

    .venv/bin/python -m benchmarks.performance.bench_self_consistency --limit 1 --max_gen_toks 32
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_common import RESULTS, offline_env
from lover_lmeval.core.files import write_text
from tests import stock_yaml

TASK = "gsm8k_cot_self_consistency"
TARGET = 0.35  # the issue's bound on lover_hf's wall time over hf's


def lm_eval(model: str, model_args: str, batch_size: str, args, stock: Path, out: Path) -> tuple[float, dict]:
    """Wall seconds of one `lm_eval` command and its results' rows ({filter: exact_match})."""
    command = [sys.executable, "-m", "lm_eval", "--model", model, "--model_args", model_args, "--tasks", TASK,
               "--include_path", str(stock), "--limit", str(args.limit), "--batch_size", batch_size,
               "--gen_kwargs", f"max_gen_toks={args.max_gen_toks}", "--output_path", str(out), "--seed", "0"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    results = json.loads(max(out.rglob("results_*.json"), key=lambda p: p.stat().st_mtime).read_text())
    rows = {key.split(",", 1)[1]: value for key, value in results["results"][TASK].items()
            if key.startswith("exact_match,")}
    return seconds, rows


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=1, help="questions (each one 64 repeats)")
    parser.add_argument("--max_gen_toks", type=int, default=32)
    parser.add_argument("--hf_batch_size", default="64", help="lm-eval hf's --batch_size (64: one batch of repeats)")
    parser.add_argument("--lover_batch_size", default="auto", help="lover_hf's --batch_size")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each command, alternated; fastest kept")
    args = parser.parse_args()
    offline_env()
    from lover_lmeval.core.loading import convert_gguf, default_gguf

    folder = convert_gguf(default_gguf())
    runs = {"lover_hf": [], "hf": []}
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        stock = stock_yaml.write_overrides(Path(tmp) / "stock", [TASK])
        for repeat in range(args.repeats):
            for model, model_args, batch in (("lover_hf", "", args.lover_batch_size),
                                             ("hf", f"pretrained={folder},dtype=float32", args.hf_batch_size)):
                seconds, rows[model] = lm_eval(model, model_args, batch, args, stock, Path(tmp) / f"{model}{repeat}")
                runs[model].append(round(seconds, 1))
                print(f"{model}: {seconds:.1f} s", flush=True)
    best = {model: min(times) for model, times in runs.items()}
    ratio = best["lover_hf"] / best["hf"]
    report = {"task": TASK, "limit": args.limit, "max_gen_toks": args.max_gen_toks,
              "batch_size": {"hf": args.hf_batch_size, "lover_hf": args.lover_batch_size},
              "wall_s": runs, "fastest_s": best, "ratio": round(ratio, 3), "target": TARGET,
              "meets_target": ratio <= TARGET, "rows": rows, "machine": cpu_name(),
              "cpus": os.cpu_count(), "date": datetime.date.today().isoformat()}
    write_text(RESULTS / "self_consistency.json", json.dumps(report, indent=1) + "\n")
    own = ", ".join(f"{name} {rows['hf'][name]:.2f}" for name in ("score-first", "maj@64", "maj@8"))
    lover_own = ", ".join(f"{name} {rows['lover_hf'][name]:.2f}" for name in ("score-first", "maj@64", "maj@8"))
    write_text(RESULTS / "self_consistency.md", "\n".join([
        f"# `{TASK}`: lover_hf against lm-eval's hf ({report['date']})", "",
        f"`python -m benchmarks.performance.bench_self_consistency --limit {args.limit} --max_gen_toks "
        f"{args.max_gen_toks} --repeats {args.repeats}` on {cpu_name()}, {os.cpu_count()} CPU cores; the embedded "
        "SmolLM2-135M-Instruct, float32, the 8-shot prompt, 64 repeats a question.", "",
        "| model | batch size | wall s (each run) | fastest s | rows |", "|---|---|---|---|---|",
        f"| hf | {args.hf_batch_size} | {runs['hf']} | {best['hf']:.1f} | {len(rows['hf'])}: {own} |",
        f"| lover_hf | {args.lover_batch_size} | {runs['lover_hf']} | {best['lover_hf']:.1f} | "
        f"{len(rows['lover_hf'])}: {lover_own}, and every selector's |", "",
        f"lover_hf / hf = **{ratio:.3f}** (target ≤ {TARGET}: {'met' if ratio <= TARGET else 'not met'}). The rows' "
        "values differ between the two: each samples its own 64 answers.", ""]))
    print(f"lover_hf / hf = {ratio:.3f}")


if __name__ == "__main__":
    main()
