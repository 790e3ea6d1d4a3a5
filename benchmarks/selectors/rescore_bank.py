#!/usr/bin/env python
"""Per-token statistics (core/decode/token_stats.py) of a bank's branches, into a sidecar file, without decoding.

For each record of BANK, `features.stats_from_tokens` runs the model over the record's prompt and branches (one
prefill, then one pass per bucket of branches of similar length) and one JSON line goes to the sidecar,
benchmarks/results/selectors/<model>/<bank file stem>.stats.jsonl.gz:

    {"key": <record key>, "dtype": "float32", "margin_max_abs_diff": 2.1e-05, "seconds": 9.3,
     "branches": [{"logprob": <base64>, "topk_logprob": ..., "entropy": ..., "kl_uniform": ...}, ...]}

Each statistic is one base64 string of little-endian float16 values, one per kept token (token_stats.encode_stats,
as the banks store them); `read_sidecar` gives them back as `Branch.stats` dicts. The sidecar is written like the
gzip banks (bank_store.GzipStore): one gzip member per record, appended in one write under a lock and fsynced, so a
kill -9 loses at most the record in flight (a torn last member is skipped on reading) and a rerun skips the keys
already written. `margin_max_abs_diff` is the largest difference between p(top1) - p(top2) recomputed by this pass
and the margins banked at decode time: ~1e-5 when model, precision and tokens are the record's.

Precision: `--dtype auto` (default) reads each record's from its key, by recomputing the key (Pipeline.record_keys'
recipe) for the model's identity, the record's prompt and every decoding mode, budget and precision the banks use;
bf16 records (the 1.5B banks) then run in bf16 and fp32 ones in fp32, and a bank of another model is refused before
its weights load. `--dtype float32|bfloat16` takes that precision for every record without checking.

Cost: SmolLM2-135M in fp32 on the shared 2-core CPU (load ~3), `--limit 2` of its GSM8K bank: 70 s and 54 s a
record (10 branches, 1,622 and 1,880 tokens; ~80% the forward pass, the rest the LM head and statistics at every
position). The 0.5B and 1.5B cost ~4x and ~11x that: whole banks belong on a GPU (`--device cuda`). For every
committed bank (each record's precision read from its key; a rerun resumes):

    export LOVER_DATA_DIR=../shared/data HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
    for bank in benchmarks/banks/*/*.jsonl.gz; do
      .venv/bin/python -m benchmarks.selectors.rescore_bank "$bank" --device cuda
    done

or one bank, e.g. `.venv/bin/python -m benchmarks.selectors.rescore_bank
benchmarks/banks/smollm2-135m-instruct/lover_gsm8k-test.jsonl.gz --limit 2` (the model is the bank's folder name,
fetched by ../shared/bin/get-model; --model or --gguf to override).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

from lover_lmeval.core.store.bank import record_key
from lover_lmeval.core.store.bank_store import GzipStore, open_store
from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.decode.decoding import MODES, DecodingConfig
from lover_lmeval.core.loading import model_identity, sha256_file
from lover_lmeval.core.decode.token_stats import STAT_NAMES, decode_stats, encode_stats

from benchmarks.bench_common import RESULTS, UNTIL, add_model_options, load_model, model_path

SIDECARS = RESULTS / "selectors"
BUDGETS = (128, 256, 512, 1024, 2048)  # max_gen_toks the banks were decoded with (part of their keys)
DTYPES = ("float32", "bfloat16", "float16")
#: A record whose banked margins this pass misses by more than this was decoded otherwise (another precision, model
#: or device in half precision): its statistics are logged as doubtful. fp32 reproduces them to ~1e-5.
MARGIN_WARN = 1e-2


def sidecar_path(bank: Path, model: str) -> Path:
    """benchmarks/results/selectors/<model>/<bank file name without .jsonl.gz (or its suffix)>.stats.jsonl.gz"""
    stem = bank.name[: -len(".jsonl.gz")] if bank.name.endswith(".jsonl.gz") else bank.stem
    return SIDECARS / model / f"{stem}.stats.jsonl.gz"


def read_sidecar(path: str | Path) -> dict[str, list[dict[str, list[float]]]]:
    """Record key -> per branch its `Branch.stats` dict (float16 values), from a sidecar this script wrote."""
    return {r["key"]: [decode_stats(b) for b in r["branches"]] for r in GzipStore(Path(path)).records()}


def key_dtypes(identity: str, prompt_ids: list[int], n_branches: int) -> dict[str, str]:
    """Every key a record of this model and prompt can have -> the precision it names (Pipeline.record_keys)."""
    found = {}
    for mode in MODES:
        decoding = asdict(DecodingConfig(n_branches=n_branches, mode=mode))
        for budget in BUDGETS:
            for dtype in DTYPES:
                for rng in ((None, "question_seed") if mode == "sample" else (None,)):
                    settings = {"decoding": decoding, "until": UNTIL, "max_gen_toks": budget}
                    settings.update({"dtype": dtype} if dtype != "float32" else {})
                    settings.update({"rng": rng} if rng else {})
                    found[record_key(identity, prompt_ids, settings)] = dtype
    return found


def keys_from(path: str) -> set[str]:
    """Keys listed in `path`: a bank or sidecar (gzip members or SQLite), else one key per line."""
    with open(path, "rb") as handle:
        head = handle.read(16)
    if head.startswith(b"\x1f\x8b") or head.startswith(b"SQLite format 3"):
        return {r["key"] for r in open_store(path).records()}
    return {line.strip() for line in Path(path).read_text().splitlines() if line.strip()}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("bank", help="a bank file, e.g. benchmarks/banks/smollm2-135m-instruct/lover_gsm8k-test.jsonl.gz")
    add_model_options(p, model=None, dtype=None, model_default="the bank's folder name")  # --dtype below
    p.add_argument("--dtype", default="auto", choices=("auto", *DTYPES),
                   help="auto (default): each record's precision, read from its key; else this one for all")
    p.add_argument("--limit", type=int, default=None, help="rescore at most this many records this run")
    p.add_argument("--keys-from", default=None, help="only these records: a bank, a sidecar, or one key per line")
    p.add_argument("--out", default=None, help="sidecar path (default benchmarks/results/selectors/<model>/...)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default torch's)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        p.error(f"--limit {args.limit}: pass a positive number of records")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from lover_lmeval.core.decode.features import stats_from_tokens

    if args.threads:
        torch.set_num_threads(args.threads)
    bank = Path(args.bank)
    if not bank.is_file():
        raise SystemExit(f"{bank} is not a file: pass a bank, e.g. benchmarks/banks/<model>/<task>.jsonl.gz")
    model_name = args.model = args.model or bank.parent.name
    out = Path(args.out) if args.out else sidecar_path(bank, model_name)
    sidecar = GzipStore(out)
    done = {r["key"] for r in sidecar.records()}
    wanted = keys_from(args.keys_from) if args.keys_from else None
    gguf = Path(model_path(args))
    identity = model_identity(str(gguf), sha256_file(gguf), None)
    todo, seen, unmatched = [], set(done), 0
    for record in open_store(bank).records():
        if record["key"] in seen or (wanted is not None and record["key"] not in wanted):
            continue
        seen.add(record["key"])
        dtype = args.dtype
        if dtype == "auto":
            dtype = key_dtypes(identity, record["prompt_ids"], len(record["branches"])).get(record["key"])
            unmatched += dtype is None
        if dtype is not None:
            todo.append((dtype, record))
    if unmatched and not todo and not done:
        raise SystemExit(f"no record of {bank} has a key of {model_name} ({identity}) with the known settings: pass "
                         "the bank's model (--model / --gguf), or --dtype to rescore without checking keys")
    if unmatched:
        print(f"[rescore] {unmatched} records match no known settings of {model_name}: skipped (--dtype to force)")
    todo.sort(key=lambda item: DTYPES.index(item[0]))  # stable: file order within a precision, one model load each
    todo = todo[: args.limit]
    print(f"[rescore] {bank}: {len(done)} records already in {out}, {len(todo)} to rescore "
          f"({', '.join(f'{d} {sum(t[0] == d for t in todo)}' for d in DTYPES if any(t[0] == d for t in todo))})",
          flush=True)
    model, loaded, began = None, None, None
    for count, (dtype, record) in enumerate(todo, 1):
        if dtype != loaded:
            model, loaded = None, None  # the previous precision's weights go before the next load
            model, _, _ = load_model(model_name, dtype, gguf=str(gguf))
            model.to(args.device)
            loaded = dtype
        began = began or time.perf_counter()  # the rate counts records, not the first model load
        branches = [Branch(b["text"], b["token_ids"], b["margins"], [tuple(o) for o in b["offsets"]],
                           b["finish_reason"]) for b in record["branches"]]
        start = time.perf_counter()
        found = stats_from_tokens(model, record["prompt_ids"], branches, margins=True)
        seconds = time.perf_counter() - start
        diff = max((abs(a - b) for branch, f in zip(branches, found) for a, b in zip(branch.margins, f["margin"])),
                   default=0.0)
        sidecar.add({"key": record["key"], "dtype": dtype, "margin_max_abs_diff": diff, "seconds": round(seconds, 2),
                     "branches": [encode_stats({name: f[name] for name in STAT_NAMES}) for f in found]})
        rate = count / (time.perf_counter() - began) * 60
        flag = f"  (!) margins differ by > {MARGIN_WARN:g}: decoded in another precision or model?" \
            if diff > MARGIN_WARN else ""
        print(f"{time.strftime('%H:%M:%S')} {count}/{len(todo)} {record['key'][:12]} {dtype} "
              f"{sum(len(b.token_ids) for b in branches)} tokens {seconds:.1f} s, margin diff {diff:.1e}; "
              f"{rate:.2f} records/min, ~{(len(todo) - count) / rate:.0f} min left{flag}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
