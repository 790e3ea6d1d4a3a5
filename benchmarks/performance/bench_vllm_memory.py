#!/usr/bin/env python
"""lover_vllm's peak memory beside vs in phases, on vLLM's CPU backend: the same `lm_eval` command with
memory_plan=beside and memory_plan=phases, the same engine share (gpu_memory_utilization, explicit: on the CPU it is
the share of RAM the engine process takes for weights and KV), each run alone.

The peak is the largest sum of resident memory over the run's process tree (lm_eval and vLLM's engine processes),
sampled every 0.2 s through /proc, with the time of that peak and the phase the log was in. Beside, the engine and
the HF copy are resident together; in phases the engine exits before the HF copy loads, so the peak is the larger
of the two alone. Also the wall time of each run. Writes benchmarks/results/vllm_memory.{json,md}:

    .venv-vllm/bin/python -m benchmarks.performance.bench_vllm_memory [--model qwen2.5-coder-0.5b-instruct] \
      [--limit 3] [--max-gen-toks 48] [--utilization 0.3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from lover_lmeval.core.files import write_text

from benchmarks.bench_common import RESULTS, model_file

GiB = 1 << 30


def tree_rss(root: psutil.Process) -> int:
    """Resident bytes of `root` and every descendant now (a process that has just exited counts 0)."""
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def run(layout: str, args, workdir: Path) -> dict:
    """One lm_eval run with memory_plan=`layout`; its wall seconds, peak tree RSS and the log line before the peak."""
    model_args = (f"gguf_file={args.gguf},memory_plan={layout},gpu_memory_utilization={args.utilization},"
                  f"max_model_len={args.max_model_len},enforce_eager=true")
    command = [sys.executable, "-m", "lm_eval", "--model", "lover_vllm", "--model_args", model_args, "--tasks",
               args.task, "--limit", str(args.limit), "--gen_kwargs", f"max_gen_toks={args.max_gen_toks}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    log = workdir / f"{layout}.log"
    began = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
        root, peak, at = psutil.Process(process.pid), 0, 0.0
        while process.poll() is None:
            now = tree_rss(root)
            if now > peak:
                peak, at = now, time.perf_counter() - began
            time.sleep(0.2)
    seconds = time.perf_counter() - began
    lines = log.read_text().splitlines()
    if process.returncode != 0:
        raise SystemExit(f"{layout}: lm_eval exited {process.returncode}; its log's tail:\n" + "\n".join(lines[-30:]))
    phases = [line for line in lines if "lover_vllm phases" in line or "memory plan" in line]
    return {"layout": layout, "seconds": round(seconds, 1), "peak_gib": round(peak / GiB, 2),
            "peak_at_s": round(at, 1), "plan_and_phase_lines": phases, "command": " ".join(command)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--gguf", help="a GGUF file (default: get-model's file of --model)")
    parser.add_argument("--task", default="lover_gsm8k")
    parser.add_argument("--limit", type=int, default=3)
    parser.add_argument("--max-gen-toks", type=int, default=48)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--utilization", type=float, default=0.3,
                        help="the engine's share of RAM, both layouts (float32 0.5B: its weights and vLLM's non-KV "
                             "use need ~0.2 of 24 GB)")
    args = parser.parse_args()
    args.gguf = args.gguf or model_file(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run(layout, args, Path(tmp)) for layout in ("beside", "phases")]
    total = psutil.virtual_memory().total
    report = {"command": " ".join(sys.argv), "machine": f"{platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cores, {total / GiB:.1f} GiB RAM", "load_average_end": os.getloadavg(),
              "args": vars(args), "rows": rows}
    write_text(RESULTS / "vllm_memory.json", json.dumps(report, indent=1) + "\n")
    table = ["| layout | wall s | peak RSS of the process tree (GiB) | peak at s |", "|---|---|---|---|"]
    table += [f"| {r['layout']} | {r['seconds']} | {r['peak_gib']} | {r['peak_at_s']} |" for r in rows]
    write_text(RESULTS / "vllm_memory.md",
               f"`{report['command']}`\n\nMachine: {report['machine']}; {args.model} (its GGUF, converted), "
               f"{args.task}, {args.limit} questions, N = 10, max_gen_toks {args.max_gen_toks}, engine share "
               f"{args.utilization} of RAM in both layouts.\n\n" + "\n".join(table) + "\n")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
