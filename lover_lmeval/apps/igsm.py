"""`lover igsm`: write iGSM grade-school problems (mod 23) as jsonl, from our generator (data/igsm.py)."""

from __future__ import annotations

import argparse

# IGSMConfig's field defaults, repeated because importing data/igsm.py loads torch (through core/__init__.py) and
# `lover igsm --help` must not wait for it; tests/test_cli_help.py checks that they equal IGSMConfig()'s.
DEFAULTS = {"max_op": 8, "max_edge": 12, "perm_level": 5, "detail_level": 0, "seed": 42}


def add_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--max-op", type=int, default=DEFAULTS["max_op"], help="max operations (1..24)")
    parser.add_argument("--n", type=int, default=100, help="number of problems")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="base seed")
    parser.add_argument("--max-edge", type=int, default=DEFAULTS["max_edge"], help="max structure-graph edges")
    parser.add_argument("--perm-level", type=int, default=DEFAULTS["perm_level"], help="shuffling (0..5)")
    parser.add_argument("--detail-level", type=int, default=DEFAULTS["detail_level"],
                        help="irrelevant sentences (0..10)")
    parser.add_argument("--out", required=True, help="output .jsonl path")


def run(args) -> int:
    from ..data.igsm import IGSMConfig, generate, write_jsonl  # lazy: it loads torch (core/__init__); --help must not

    config = IGSMConfig(max_op=args.max_op, max_edge=args.max_edge, perm_level=args.perm_level,
                        detail_level=args.detail_level, seed=args.seed)
    records = generate(config, args.n)
    write_jsonl(records, args.out)
    print(f"wrote {len(records)} iGSM problems (max_op={config.max_op}) to {args.out}")
    return 0
