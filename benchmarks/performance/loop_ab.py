"""The decoding loop's variants side by side (issue GPU decode): the growing batch stepping with one host transfer a
step (the default), the same in blocks of K steps (`sync_every`), static rows (`static_cache`), static rows in blocks,
and with `--compile` static rows whose step is compiled (a CUDA graph on a GPU). Arms alternate (R rounds), so drift
in the machine's speed falls on all; every arm must give the first arm's branches token for token (float32; in half
precision which rows share a step may flip a near-tie, so there the check is reported, not required).

With `--profile`, one more pass of the default arm, of the static arm in blocks and (with `--compile`) of the compiled
arm under torch.profiler, the eager ones `--profile-tokens` steps long (a profiled pass runs several times slower,
and a few dozen steps show the per-step pattern): host (CPU) and device time per step, and the ops that take it, into
a text file beside the JSON.

    .venv/bin/python -m benchmarks.performance.loop_ab --rounds 2                      # CPU, SmolLM2, fp32
    .venv/bin/python -m benchmarks.performance.loop_ab --model qwen2.5-coder-1.5b-instruct --gguf q15.gguf \\
        --device cuda --dtype bfloat16 --questions 20 --rows 100 --compile --profile   # a lent GPU
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from datetime import datetime
from pathlib import Path

from benchmarks.bank_sets import model_source
from benchmarks.bench_common import BANKS, RESULTS

ARMS = {  # name -> (sync_every, static_cache, compile_step)
    "growing, sync 1": (1, False, False),
    "growing, sync K": (None, False, False),
    "static, sync 1": (1, True, False),
    "static, sync K": (None, True, False),
    "static, sync K, compiled": (None, True, True),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="a get-model name (its GSM8K bank's prompts)")
    p.add_argument("--gguf", default=None, help="the model's GGUF file (default: fetched by get-model)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--questions", type=int, default=4, help="first Q GSM8K test prompts of the model's bank set")
    p.add_argument("--rows", type=int, default=20, help="max_rows (default 20: two questions of 10 branches)")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--sync", type=int, default=8, help="K, steps a block for the `sync K` arms (default 8)")
    p.add_argument("--rounds", type=int, default=1, help="R, times each arm runs (alternated); the min counts")
    p.add_argument("--compile", action="store_true", help="add the compiled static arm")
    p.add_argument("--profile", action="store_true",
                   help="profile the default, the static-in-blocks and (with --compile) the compiled arm")
    p.add_argument("--profile-tokens", type=int, default=32,
                   help="steps of each eager profiled pass (default %(default)s; the compiled arm keeps its length)")
    p.add_argument("--output", default=None, help="JSON path (default benchmarks/results/loop_ab_<date>.json)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from lover_lmeval.core.decode.decoding import BatchingConfig, DecodingConfig
    from lover_lmeval.core.decode.engine import HFEngine, RunSpec, decode_all
    from lover_lmeval.core.files import write_text
    from lover_lmeval.core.store.bank_store import open_store
    from lover_lmeval.harness.model import LoverLM

    started = datetime.now()
    gguf = args.gguf or model_source(args.model)[0]
    bank = BANKS / args.model / "lover_gsm8k-test.jsonl.gz"
    if not bank.is_file():
        raise SystemExit(f"no GSM8K bank {bank}; choose a --model with one: "
                         f"{sorted(p.parent.name for p in BANKS.glob('*/lover_gsm8k-test.jsonl.gz'))}")
    # The bank's own prompts (no tokenizer or data needed: a device machine has neither get-model nor the hub).
    prompts = [record["prompt_ids"] for record, _ in zip(open_store(bank).records(), range(args.questions))]
    lm = LoverLM(gguf_file=gguf, dtype=args.dtype, device=args.device, verifier=None)
    model, tok = lm.model, lm.tokenizer
    until = ["Question:", "</s>", "<|im_end|>", "<|endoftext|>"]
    config = DecodingConfig(n_branches=10)
    arms = {k: v for k, v in ARMS.items() if args.compile or not v[2]}

    def run(arm, max_new_tokens=args.max_new_tokens):
        sync, static, compiled = arms[arm]
        sync = args.sync if sync is None else sync
        engine = HFEngine(model, tok, BatchingConfig(sync_every=sync, static_cache=static, compile_step=compiled))
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        began = time.perf_counter()
        branches, _ = decode_all(engine, prompts, RunSpec(config, until, max_new_tokens, args.rows))
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - began, [b.token_ids for q in branches for b in q]

    decode_all(HFEngine(model, tok), prompts[:1], RunSpec(config, until, 2, args.rows))  # warm-up, not timed
    if args.compile:  # the first compiled run compiles: timed apart
        compile_s, _ = run("static, sync K, compiled")
        print(f"[loop_ab] compile run: {compile_s:.1f}s", flush=True)
    seconds, tokens = {arm: [] for arm in arms}, {}
    for _ in range(args.rounds):
        for arm in arms:
            took, tokens[arm] = run(arm)
            seconds[arm].append(round(took, 3))
            print(f"[loop_ab] {arm}: {took:.2f}s", flush=True)
    first = next(iter(arms))
    generated = sum(len(t) for t in tokens[first])
    res = {"benchmark": "loop_ab", "date": started.isoformat(timespec="seconds"),
           "command": shlex.join([sys.executable, *sys.argv]), "device": args.device,
           "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
           "torch_threads": torch.get_num_threads(), "model": args.model, "dtype": args.dtype,
           "questions": len(prompts), "rows": args.rows, "sync_K": args.sync, "max_new_tokens": args.max_new_tokens,
           "generated_tokens": generated, "seconds": seconds,
           "tokens_per_s_of_min": {arm: round(generated / min(times), 1) for arm, times in seconds.items()},
           "same_branches_as_first": {arm: tokens[arm] == tokens[first] for arm in arms}}
    if args.compile:
        res["compile_run_s"] = round(compile_s, 1)
    out = Path(args.output or RESULTS / f"loop_ab_{args.model}_{args.device}_{started.date()}.json")
    write_text(out, json.dumps(res, indent=2) + "\n")  # the timed rows first: a run cut short in the profile keeps them
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
        tables = []
        for arm in ("growing, sync 1", "static, sync K", *(["static, sync K, compiled"] if args.compile else [])):
            # The compiled step's cache is sized by the token budget: another budget would compile again, in the
            # profile. Its replays launch few kernels, so a full-length profiled pass costs little.
            with profile(activities=activities) as prof:
                run(arm, args.max_new_tokens if arms[arm][2] else args.profile_tokens)
            sort = "self_cuda_time_total" if args.device.startswith("cuda") else "self_cpu_time_total"
            tables.append(f"## {arm}\n{prof.key_averages().table(sort_by=sort, row_limit=25)}")
        write_text(out.with_suffix(".profile.txt"), "\n\n".join(tables) + "\n")
        res["profile"], res["profile_tokens"] = out.with_suffix(".profile.txt").name, args.profile_tokens
        write_text(out, json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: res[k] for k in ("tokens_per_s_of_min", "same_branches_as_first")}, indent=1))
    print(f"[loop_ab] wrote {out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
