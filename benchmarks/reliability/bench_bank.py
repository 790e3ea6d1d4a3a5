#!/usr/bin/env python
"""Bank storage: SQLite (WAL, one transaction per question, zlib blobs) vs gzip members, on a committed bank.

Writes every record of SOURCE into a fresh bank of each kind the way a decode does (one durable write per question),
then opens it and reads every question back through `BranchBank`. Reports file size, write and read time.

    .venv/bin/python -m benchmarks.reliability.bench_bank \
        benchmarks/banks/qwen2.5-coder-0.5b-instruct/lover_gsm8k-test.jsonl.gz --out benchmarks/results/bench_bank.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from lover_lmeval.core.store.bank import BranchBank
from lover_lmeval.core.store.bank_store import open_store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    records = list(open_store(args.source).records())
    folder = Path(tempfile.mkdtemp(prefix="lover-bench-bank-"))
    rows = {}
    for kind, name in (("gzip", "bank.jsonl.gz"), ("sqlite", "bank.sqlite")):
        path = folder / name
        begin = time.perf_counter()
        store = open_store(path)
        for record in records:
            store.add(record)
        write = time.perf_counter() - begin
        begin = time.perf_counter()
        bank = BranchBank(path)
        branches = [bank.get(r["key"]) for r in records]
        read = time.perf_counter() - begin
        assert all(b is not None for b in branches)
        size = sum(p.stat().st_size for p in folder.glob(name + "*"))  # with SQLite's -wal/-shm while open
        rows[kind] = {"bytes": path.stat().st_size, "bytes_with_sidecars": size, "write_s": round(write, 3),
                      "write_ms_per_question": round(1000 * write / len(records), 2), "open_and_read_all_s": round(read, 3)}
    report = {"command": " ".join(sys.argv), "source": args.source, "questions": len(records), **rows,
              "sqlite_over_gzip_bytes": round(rows["sqlite"]["bytes"] / rows["gzip"]["bytes"], 3)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
