#!/usr/bin/env python
"""Decoding steps of batch-by-batch vs continuous batching, counted from a bank's real branch lengths (no model).

A step is one forward of every row still decoding. Batch by batch, `batch` questions (N rows each) start together and
the batch lives until its longest branch ends; continuously (`HFEngine.decode` with `max_rows` = batch x N), a question
is admitted as soon as N rows are free, in bank order. Where a step costs about the same for any number of rows (a
GPU: run 15, benchmarks/runs/run15_gpu_outside_check.md, measured ~100 ms a step, host-bound), time follows the step
count; on the 2-core CPU, past ~25 rows, it follows the tokens instead, which no schedule changes.

A branch's decoded tokens are its kept tokens, plus one when it ended on EOS or a stop string (the token that ended
it; a stop string spread over several tokens makes this a slight undercount, the same for both schedules).

    .venv/bin/python -m benchmarks.performance.schedule_steps \
      --bank benchmarks/banks/qwen2.5-coder-0.5b-instruct/lover_gsm8k-test.jsonl.gz \
      --out benchmarks/results/schedule_steps_qwen2.5-coder-0.5b-instruct_gsm8k.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lover_lmeval.core.store.bank_store import open_store


def batch_by_batch(lengths: list[list[int]], batch: int) -> int:
    """Steps: each batch runs until its longest branch has all its tokens (the first comes from the prefill)."""
    return sum(max(max(q) for q in lengths[s: s + batch]) - 1 for s in range(0, len(lengths), batch))


def continuous(lengths: list[list[int]], max_rows: int) -> tuple[int, float]:
    """(steps, mean rows per step) when questions join as soon as their N rows are free."""
    queue, active, steps, rows = list(range(len(lengths))), [], 0, 0
    while queue or active:
        while queue and len(active) + len(lengths[queue[0]]) <= max_rows:
            active += [n - 1 for n in lengths[queue.pop(0)]]  # tokens still to decode after the prefill's first
        active = [n for n in active if n > 0]
        if not active or (queue and len(active) + len(lengths[queue[0]]) <= max_rows):
            continue
        steps, rows = steps + 1, rows + len(active)
        active = [n - 1 for n in active]
    return steps, rows / max(steps, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bank", required=True)
    parser.add_argument("--batches", default="5,10", help="questions per batch (rows = batch x N)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    lengths = [[len(b["token_ids"]) + (b["finish_reason"] != "length") for b in record["branches"]]
               for record in open_store(args.bank).records()]
    tokens, n = sum(map(sum, lengths)), len(lengths[0])
    report = {"bank": args.bank, "questions": len(lengths), "n_branches": n, "decoded_tokens": tokens, "rows": {}}
    for batch in (int(b) for b in args.batches.split(",")):
        plain = batch_by_batch(lengths, batch)
        steps, busy = continuous(lengths, batch * n)
        report["rows"][batch * n] = {"batch_by_batch_steps": plain, "continuous_steps": steps,
                                     "continuous_over_batch_by_batch": steps / plain,
                                     "rows_busy_batch_by_batch": (tokens - len(lengths) * n) / (plain * batch * n),
                                     "rows_busy_continuous": busy / (batch * n)}
        print(f"{len(lengths)} questions, {batch * n} rows: {plain} steps batch by batch, {steps} continuous "
              f"({steps / plain:.2f}x)", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
