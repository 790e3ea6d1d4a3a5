#!/usr/bin/env python
"""Peak host memory of the test-time fit per 1,000 questions (issue Ranks, item 6), on real Qwen2.5-Coder-0.5B
features.

The features of the first --real GSM8K test questions (the committed fp32 bank, layer 12; feature cache) are read once
and written to a scratch file; then, for each number of questions Q and each storage, a fresh process builds Q
results by cycling those questions (each result its own copy, as lm-eval holds them), runs `fit_on_results` (the
default fit, --epochs epochs, one restart: memory does not depend on how long it trains) and reports its peak RSS
(VmHWM, reset after the imports) and the RSS before the results existed. Storages:

- `float32, dense`: what a float32 model's run does (and every run did before item 6): float32 results, the fit
  keeps a float32 normalised copy of the whole task;
- `bfloat16, dense`: a bf16 model's results (half the bytes), fit as before;
- `bfloat16, streamed`: the same results with `max_dense_gib=0.05`, the fit normalising a chunk of questions at a time.

The slope of peak RSS over Q is the memory per 1,000 questions; `--synthetic-12k` also fits 12,000 questions of
random 4096-wide bf16 features with the default `max_dense_gib` (2: their float32 copy, 3.7 GiB, is over it, so the
fit streams; the issue's "12k questions on a 4096-wide model"). Example:

    LOVER_DATA_DIR=../shared/data HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
      .venv/bin/python -m benchmarks.performance.bench_memory \
      --out benchmarks/results/memory_qwen2.5-coder-0.5b-instruct.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_common import BANKS, REPO, model_file, task_contexts

STREAMED_GIB = 0.05  # a small budget, so the streamed rows stream (chunks of ~700 questions at D = 896)
STORAGES = {"float32, dense": ("float32", 2.0), "bfloat16, dense": ("bfloat16", 2.0),
            "bfloat16, streamed": ("bfloat16", STREAMED_GIB)}


def reset_peak() -> None:
    """Start the peak-RSS counter afresh (Linux >= 4.0), so start-up's own peak (imports) does not hide the fit's."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_mib() -> float:
    """VmHWM: the peak resident set since the last reset_peak()."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def current_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20


def export(scratch: Path, n_real: int) -> None:
    """The first `n_real` banked test questions' features (N, 2, D) and branch texts -> scratch.npz / .json."""
    import numpy as np
    from lm_eval.tasks import TaskManager

    from lover_lmeval.harness.model import LoverLM

    gguf = model_file("qwen2.5-coder-0.5b-instruct")
    bank = BANKS / "qwen2.5-coder-0.5b-instruct" / "lover_gsm8k-test.jsonl.gz"
    lm = LoverLM(gguf_file=gguf, dtype="float32", bank=str(bank), bank_only=True, verifier=None, layer=12)
    task = TaskManager().load(["lover_gsm8k"])["tasks"]["lover_gsm8k"]
    contexts = task_contexts(task, lm, list(task.dataset["test"])[:n_real])
    results = lm.run_contexts(contexts, dict(task.config.generation_kwargs))
    np.savez(scratch / "features.npz", *[r.features for r in results])
    (scratch / "texts.json").write_text(json.dumps([r.texts for r in results]))


def measure(scratch: Path, n_questions: int, dtype: str, max_dense_gib: float, epochs: int) -> dict:
    """One child process's work: build the results, fit, report memory (called with --child)."""
    import numpy as np
    import torch

    from lover_lmeval.core.decode.branch import Branch
    from lover_lmeval.core.results import LoverResult
    from lover_lmeval.core.verify.scoring import fit_on_results
    from lover_lmeval.core.verify.verifier import VerifierConfig

    reset_peak()
    before = current_mib()
    if scratch.name == "synthetic":  # (Q, 10, 2, 4096) random bf16, two answers per question
        g = torch.Generator().manual_seed(0)
        texts = [[f"The answer is {b % 2}." for b in range(10)]]
        real = [torch.randn(10, 2, 4096, generator=g)]
    else:
        stored = np.load(scratch / "features.npz")
        real = [torch.from_numpy(stored[k]) for k in stored.files]
        texts = json.loads((scratch / "texts.json").read_text())
    to = getattr(torch, dtype)
    results = [LoverResult([Branch(t, [0], [0.0], [(0, len(t))], "eos") for t in texts[q % len(texts)]],
                           real[q % len(real)].to(to, copy=True)) for q in range(n_questions)]
    with_results = current_mib()
    config = VerifierConfig(epochs=epochs, restarts=1, max_dense_gib=max_dense_gib)
    t0 = time.perf_counter()
    fit_on_results(results, "number", config)
    return {"questions": n_questions, "dtype": dtype, "max_dense_gib": max_dense_gib, "rss_before_mib": before,
            "rss_with_results_mib": with_results, "peak_rss_mib": peak_mib(),
            "fit_seconds": time.perf_counter() - t0}


def child(scratch: Path, n_questions: int, dtype: str, max_dense_gib: float, epochs: int) -> dict:
    cmd = [sys.executable, "-m", __spec__.name, "--child", str(scratch), str(n_questions), dtype, str(max_dense_gib),
           str(epochs)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO).stdout
    return json.loads(out.strip().splitlines()[-1])


def slope_per_1000(rows: list[dict]) -> float:
    """Least-squares slope of peak RSS (MiB) over questions, per 1,000 questions."""
    xs, ys = [r["questions"] for r in rows], [r["peak_rss_mib"] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return 1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        scratch, n, dtype, gib, epochs = sys.argv[2:]
        print(json.dumps(measure(Path(scratch), int(n), dtype, float(gib), int(epochs))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", default="1000,2000,4000", help="task sizes Q to fit")
    parser.add_argument("--real", type=int, default=150, help="real banked questions cycled to make them")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--synthetic-12k", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    report = {"command": " ".join(sys.argv), "model": "qwen2.5-coder-0.5b-instruct, layer 12, D = 896, N = 10",
              "storages": {}}
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as tmp:
        export(Path(tmp), args.real)
        for name, (dtype, gib) in STORAGES.items():
            rows = [child(Path(tmp), int(q), dtype, gib, args.epochs) for q in args.questions.split(",")]
            report["storages"][name] = {"rows": rows, "peak_rss_mib_per_1000_questions": slope_per_1000(rows)}
            print(f"{name}: {slope_per_1000(rows):.1f} MiB per 1,000 questions; "
                  + ", ".join(f"Q={r['questions']}: peak {r['peak_rss_mib']:.0f} MiB" for r in rows), flush=True)
    if args.synthetic_12k:
        with tempfile.TemporaryDirectory(prefix="bench_memory_") as tmp:
            synthetic = Path(tmp) / "synthetic"
            synthetic.mkdir()
            report["synthetic_12k_4096_bf16_streamed"] = child(synthetic, 12_000, "bfloat16", 2.0, 1)
            print("12,000 x 4096 bf16, streamed:", report["synthetic_12k_4096_bf16_streamed"], flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
