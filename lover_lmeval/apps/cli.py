"""`lover` command line: `lover igsm` (iGSM problems), `lover train` (fit a verifier), `lover compare`, `lover bank`,
`lover view` (a run as one HTML file).

Subcommand modules are imported only when their subcommand runs, so `lover --help` stays instant; and they import
torch, lm-eval, transformers and every core module (core/__init__.py loads torch) only in the `run` function that runs
the command, never at their top, so `lover <subcommand> --help` is instant too (tests/test_cli_help.py). `train` and
`compare` are recipes (train.py, compare.py) with their settings in settings.py; their command lines, train_cli.py
and compare_cli.py, import the recipe in that one place.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module with add_arguments(parser) and run(args) -> int, one-line help)
SUBCOMMANDS = {
    "igsm": ("lover_lmeval.apps.igsm", "generate iGSM grade-school problems (mod 23) as jsonl"),
    "train": ("lover_lmeval.apps.train_cli", "decode a task's training split and fit a LoVer verifier checkpoint"),
    "compare": ("lover_lmeval.apps.compare_cli", "leaderboard of selection strategies with bootstrap intervals (via lm-eval)"),
    "bank": ("lover_lmeval.apps.bank", "inspect a branch bank or convert it (SQLite, gzip, plain JSON lines)"),
    "view": ("lover_lmeval.apps.view", "one self-contained HTML file of a run (lm_eval --log_samples output or a lover "
             "compare folder): per question its N branches and every selector's pick"),
}


class _DefaultsFormatter(argparse.HelpFormatter):
    """Appends an option's default to its help when it has a meaningful one (not None/False/"") and the help does
    not already say it; argparse's ArgumentDefaultsHelpFormatter would print "(default: None)" on required options."""

    def _get_help_string(self, action):
        text = action.help or ""
        # identity checks: `0 in (False,)` is true, and a default of 0 should still be shown
        meaningless = action.default is None or action.default is False or action.default in ("", argparse.SUPPRESS)
        if not meaningless and "default" not in text:
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lover",
        description="LoVer for lm-evaluation-harness. Evaluate with "
                    "`lm_eval --model lover_hf --tasks lover_gsm8k`.",
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
        sub = argparse.ArgumentParser(prog=f"lover {argv[0]}", description=SUBCOMMANDS[argv[0]][1],
                                      formatter_class=_DefaultsFormatter)
        module.add_arguments(sub)
        return int(module.run(sub.parse_args(argv[1:])) or 0)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
