"""`lover compare`'s command line: its options, read into CompareSettings, and the recipe (compare.py) run on them.

Parsing imports nothing heavy, so `lover compare --help` is instant (tests/test_cli_help.py); `run` imports the
recipe, in one place, when the command runs.
"""

from __future__ import annotations

import logging

from .leaderboard import render_diagnostics, render_markdown
from .settings import CompareSettings, add_lm_eval_arguments, lm_eval_settings


def add_arguments(parser) -> None:
    add_lm_eval_arguments(parser)
    parser.add_argument("--tasks", required=True, help="comma-separated task names, e.g. lover_gsm8k")
    parser.add_argument("--limit", type=int, default=CompareSettings.limit,
                        help="first N documents of each task (all if unset)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--n_boot", type=int, default=CompareSettings.n_boot, help="bootstrap resamples per interval")
    parser.add_argument("--seed", type=int, default=CompareSettings.seed,
                        help="seed of the bootstrap and the cross-fit")
    parser.add_argument("--layers", default="", help="comma-separated feature layers to sweep (label-free refit per "
                        "layer), e.g. 4,8,12,16,20; writes accuracy_vs_layer.png")
    parser.add_argument("--verifiers", default="", help="extra checkpoints scored on the same features, as "
                        "NAME=PATH[,NAME=PATH]; adds rows NAME_max / NAME_sum (e.g. trained=verifier_ckpts/...)")
    parser.add_argument("--cv_folds", type=int, default=CompareSettings.cv_folds, help="folds of the cross-fitted "
                        "supervised ceiling (rows supervised_cv_*; gold labels of the other folds only); 0 skips it")


def settings_from(args) -> CompareSettings:
    """The recipe's settings from the parsed options; a malformed option ends the command with a one-line refusal."""
    try:
        layers = [int(x) for x in args.layers.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--layers {args.layers!r} must be comma-separated integers, e.g. 4,8,12") from None
    pairs = [item.split("=", 1) for item in args.verifiers.split(",") if item.strip()]
    if any(len(pair) != 2 for pair in pairs):
        raise SystemExit(f"--verifiers {args.verifiers!r} must be NAME=PATH pairs, "
                         "e.g. trained=verifier_ckpts/m/gsm8k.safetensors")
    try:
        return CompareSettings(**lm_eval_settings(args), tasks=args.tasks.split(","), out=args.out, limit=args.limit,
                               n_boot=args.n_boot, seed=args.seed, layers=layers, cv_folds=args.cv_folds,
                               checkpoints=dict(pairs))
    except ValueError as refusal:
        raise SystemExit(str(refusal)) from None


def run(args) -> int:
    logging.basicConfig(level=logging.INFO)
    settings = settings_from(args)
    # the recipe loads lm-eval, transformers and torch (seconds): imported only now that the command runs
    from .compare import compare
    from .samples import TaskNotComparable

    try:
        report = compare(settings)
    except TaskNotComparable as refusal:  # a one-line refusal, not a traceback: the task needs a fix, not the code
        raise SystemExit(str(refusal)) from None
    print(render_markdown(report))
    print(render_diagnostics(report))
    return 0
