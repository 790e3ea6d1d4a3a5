"""`lover` command line: `lover igsm` (iGSM problems), `lover train` (fit a verifier), `lover compare`.

Subcommand modules are imported only when their subcommand runs, so `lover --help` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module with add_arguments(parser) and run(args) -> int, one-line help)
SUBCOMMANDS = {
    "igsm": ("lover_lmeval.igsm", "generate iGSM grade-school problems (mod 23) as jsonl"),
    "train": ("lover_lmeval.training", "decode a task's training split and fit a LoVer verifier checkpoint"),
    "compare": ("lover_lmeval.compare", "leaderboard of selection strategies with bootstrap intervals (via lm-eval)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lover",
        description="LoVer for lm-evaluation-harness. Evaluate with "
                    "`lm_eval --model lover_hf --tasks lover_gsm8k --include_path task_configs`.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if argv and argv[0] in SUBCOMMANDS:
        module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
        sub = argparse.ArgumentParser(prog=f"lover {argv[0]}", description=SUBCOMMANDS[argv[0]][1])
        module.add_arguments(sub)
        return int(module.run(sub.parse_args(argv[1:])) or 0)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
