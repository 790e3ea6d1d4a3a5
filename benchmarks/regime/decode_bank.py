#!/usr/bin/env python
"""Decode a range of a task split's documents into a branch bank (resumable; banked ones are skipped).

`lover train` and `lover compare` decode the *first* K documents of a split; the dev questions of the Regime
protocol are documents 200-265 of GSM8K's training split, which neither can pick alone. This decodes exactly
`--docs START:END` (as lover_hf does: chat template, the task's generation kwargs, one bank record per question),
and keeps their features at the model's layer and `extra_layers` in the local feature cache, so the later
`lover compare` / `lover train` runs over the bank cost seconds. Example (the 1.5B dev questions, bf16):

    LOVER_DATA_DIR=../shared/data HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
      .venv/bin/python -m benchmarks.regime.decode_bank \
      --model_args gguf_file=$(../shared/bin/get-model qwen2.5-coder-1.5b-instruct | tail -1),dtype=bfloat16,batch_size=5 \
      --task lover_gsm8k --split train --docs 200:266 \
      --bank benchmarks/banks/qwen2.5-coder-1.5b-instruct/lover_gsm8k-train.jsonl.gz
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from lm_eval.tasks import TaskManager
from lm_eval.utils import simple_parse_args_string

from benchmarks.bench_common import REPO, docs_range, task_contexts, task_docs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_args", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--docs", required=True, help="START:END, document indices of the split (END excluded)")
    parser.add_argument("--bank", required=True)
    parser.add_argument("--gen_kwargs", default="", help="override the task's generation kwargs, e.g. max_gen_toks=256")
    parser.add_argument("--include_path", default=str(REPO / "task_configs"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    from lover_lmeval.harness.model import LoverLM

    start, end = docs_range(args.docs)
    task = TaskManager(include_path=args.include_path).load([args.task])["tasks"][args.task]
    lm = LoverLM(**{**simple_parse_args_string(args.model_args), "verifier": None, "bank": args.bank})
    contexts = task_contexts(task, lm, task_docs(task, args.split, args.docs))
    gen_kwargs = {**(task.config.generation_kwargs or {}), **simple_parse_args_string(args.gen_kwargs)}
    todo = [c for c, banked in zip(contexts, lm.in_bank(contexts, gen_kwargs)) if not banked]
    print(f"{args.task}/{args.split} docs {start}:{end}: {len(contexts) - len(todo)} banked, {len(todo)} to decode",
          flush=True)
    began, count = time.perf_counter(), [0]

    def progress(indices, results) -> None:  # each question as it is banked (continuous batching: any order)
        count[0] += len(indices)
        print(f"{time.strftime('%H:%M:%S')} decoded {count[0]}/{len(todo)} ({time.perf_counter() - began:.0f} s); "
              f"bank {len(lm.pipeline.bank)}", flush=True)

    # All at once: batch_size x N rows, a question joining as soon as another ends; each is banked when done.
    lm.run_contexts(todo, gen_kwargs, on_done=progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
