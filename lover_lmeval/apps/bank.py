"""`lover bank`: inspect a branch bank, or copy it into another format (SQLite, gzip members, plain JSON lines).

    lover bank info benchmarks/banks/qwen2.5-coder-0.5b-instruct/lover_gsm8k-test.jsonl.gz
    lover bank convert old.jsonl.gz new.sqlite        # or new.jsonl: one JSON record per line, for other tools
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("action", choices=("info", "convert"), help="info: count records; convert: copy them")
    parser.add_argument("source", help="a bank file (.sqlite / .db, or .jsonl.gz)")
    parser.add_argument("destination", nargs="?", help="convert: a bank path, or a .jsonl file (plain JSON lines)")


def run(args) -> int:
    # lazy: core/__init__ loads torch, and --help must not
    from ..core.store.bank_store import convert, open_store, store_kind

    if args.action == "convert":
        if not args.destination:
            raise SystemExit("lover bank convert needs a destination: lover bank convert SOURCE DEST")
        count = convert(args.source, args.destination)
        print(f"copied {count} records from {args.source} to {args.destination}")
        return 0
    if not Path(args.source).is_file():
        raise SystemExit(f"lover bank info: {args.source} is not a file")
    records = list(open_store(args.source).records())
    finish = Counter(b["finish_reason"] for r in records for b in r["branches"])
    print(f"{args.source}: {store_kind(Path(args.source))} bank, {len(records)} questions "
          f"({len({r['key'] for r in records})} distinct), {sum(finish.values())} branches; "
          f"finish reasons {dict(finish)}")
    return 0
