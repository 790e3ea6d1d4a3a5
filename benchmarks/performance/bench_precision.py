#!/usr/bin/env python
"""fp32 vs bf16 branch decoding on this machine: speed, and how often bf16 changes the branches.

Takes the first Q banked questions' prompts (token ids as banked, chat template included), decodes each
batch of B questions with N=10 CoT-decoding branches in float32 and in bfloat16 (the same batch back to
back, so both precisions see the same machine load), and reports wall time, generated tokens per second,
and token identity: per branch, whether bf16's tokens equal fp32's (and the banked fp32 branch's) over the
common prefix within the budget. Greedy decoding is deterministic, so a budget below the bank's compares
prefixes of the banked branches. Writes benchmarks/results/precision_<model>_<date>.json. Example:

    .venv/bin/python -m benchmarks.performance.bench_precision --model qwen2.5-coder-1.5b-instruct --questions 5 \
        --batch 5 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
import zlib
from pathlib import Path

import torch

from lover_lmeval.core.decode.decoding import DecodingConfig
from lover_lmeval.core.decode.engine import HFEngine, RunSpec, decode_all

from benchmarks.bench_common import BANKS, RESULTS, UNTIL, add_model_options, load_model, model_path


def banked_prompts(bank_path: Path, count: int) -> list[tuple[list[int], list]]:
    """(prompt ids, banked branches' token ids) of the first `count` records in file order."""
    raw = [json.loads(line) for line in _record_lines(bank_path)][:count]
    return [(r["prompt_ids"], [b["token_ids"] for b in r["branches"]]) for r in raw]


def _record_lines(path: Path):
    data = path.read_bytes()
    while data:
        inflater = zlib.decompressobj(wbits=31)
        text = inflater.decompress(data)
        data = inflater.unused_data
        yield from text.decode().splitlines()


def same_prefix(a: list[int], b: list[int], budget: int) -> bool:
    a, b = a[:budget], b[:budget]
    n = min(len(a), len(b))
    return a[:n] == b[:n] and (len(a) == len(b) or n == budget)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_options(parser, "qwen2.5-coder-1.5b-instruct", dtype=None)  # both precisions run
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gguf = model_path(args)
    loaded = {name: load_model(args.model, name, gguf) for name in ("float32", "bfloat16")}  # one conversion
    models = {name: model for name, (model, _, _) in loaded.items()}
    tokenizer = loaded["float32"][1]
    eos = {tokenizer.eos_token_id, *([models["float32"].generation_config.eos_token_id] if isinstance(
        models["float32"].generation_config.eos_token_id, int) else models["float32"].generation_config.eos_token_id or [])}
    bank = BANKS / args.model / "lover_gsm8k-test.jsonl.gz"
    items = banked_prompts(bank, args.questions)
    config = DecodingConfig(n_branches=10)
    seconds = {name: 0.0 for name in models}
    tokens = {name: 0 for name in models}
    out = {name: [] for name in models}
    for start in range(0, len(items), args.batch):
        prompts = [p for p, _ in items[start: start + args.batch]]
        for name, model in models.items():
            begin = time.perf_counter()
            branches, _ = decode_all(HFEngine(model, tokenizer, eos=eos), prompts,
                                     RunSpec(config, UNTIL, args.max_new_tokens))
            seconds[name] += time.perf_counter() - begin
            tokens[name] += sum(len(b.token_ids) for q in branches for b in q)
            out[name].extend(branches)
        print(f"batch at {start}: " + ", ".join(f"{n} {seconds[n]:.0f}s" for n in models), flush=True)
    pairs = [(f, b, banked) for fq, bq, (_, banked_q) in zip(out["float32"], out["bfloat16"], items)
             for f, b, banked in zip(fq, bq, banked_q)]
    budget = args.max_new_tokens
    report = {
        "model": args.model, "questions": len(items), "batch": args.batch, "branches": 10,
        "max_new_tokens": budget, "threads": args.threads, "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seconds": seconds, "generated_tokens": tokens,
        "tokens_per_second": {n: tokens[n] / seconds[n] for n in models},
        "bf16_speedup": seconds["float32"] / seconds["bfloat16"],
        "branches_compared": len(pairs),
        "fp32_equals_bank": sum(same_prefix(f.token_ids, k, budget) for f, _, k in pairs),
        "bf16_equals_fp32": sum(same_prefix(b.token_ids, f.token_ids, budget) for f, b, _ in pairs),
        "bf16_greedy_equals_fp32": sum(same_prefix(b[0].token_ids, f[0].token_ids, budget)
                                       for f, b in zip(out["float32"], out["bfloat16"])),
        "bf16_first_tokens_equal": sum(b.token_ids[:1] == f.token_ids[:1] for f, b, _ in pairs),
        "command": " ".join(sys.argv),
    }
    print(json.dumps(report, indent=1))
    day = datetime.date.today().isoformat()
    path = RESULTS / f"precision_{args.model}_{day}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
