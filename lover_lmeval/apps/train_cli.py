"""`lover train`'s command line: its options, read into TrainSettings, and the recipe (train.py) run on them.

Parsing imports nothing heavy, so `lover train --help` is instant (tests/test_cli_help.py); `run` imports the
recipe, in one place, when the command runs.
"""

from __future__ import annotations

import json
import logging
import os

from .settings import TrainSettings, add_lm_eval_arguments, lm_eval_settings

# VerifierConfig's default losses and the loss terms a user may name (core.verify.loss_spec.allowed_terms() but
# "supervised"), repeated for the help text because any core import loads torch (core/__init__.py);
# tests/test_cli_help.py checks them against the core.
DEFAULT_LOSSES = "nega+intra+inter"
LOSS_TERMS = ("nega", "intra", "inter", "inter_raw", "inter_logic", "balance")


def add_arguments(parser) -> None:
    add_lm_eval_arguments(parser)
    parser.add_argument("--task", required=True, help="task name, e.g. lover_gsm8k")
    parser.add_argument("--split", default=TrainSettings.split, help="train or test (the task's own split names)")
    parser.add_argument("--limit", type=int, default=TrainSettings.limit, help="first N documents of the split")
    parser.add_argument("--out", required=True, help="checkpoint path (.safetensors); .json/.report.json/.losses.png beside it")
    parser.add_argument("--supervised", action="store_true", help="ceiling baseline: BCE on gold correctness")
    parser.add_argument("--losses", default=TrainSettings.losses, help="'+'-separated subset of the terms "
                        f"{', '.join(LOSS_TERMS)}: the paper's nega, intra, inter; "
                        "inter_raw, inter_logic: variants; balance: experimental cross-question prior (default: the "
                        f"fit config's, {DEFAULT_LOSSES} unless its regime says otherwise)")
    parser.add_argument("--seed", type=int, default=TrainSettings.seed,
                        help="seed of the fit (initialisation, batching, restarts)")
    parser.add_argument("--fit_config", default=TrainSettings.fit_config, help="more VerifierConfig fields, "
                        "';'-separated, e.g. 'curriculum=0.2;epochs=60' (losses and seed have their own options)")
    parser.add_argument("--bank", default=TrainSettings.bank,
                        help="branch bank file (default: in the lover-lmeval cache dir)")
    parser.add_argument("--select", default=TrainSettings.select, help="none (label-free) or dev:K: documents --limit "
                        ".. --limit+K-1 of the split are gold-labelled dev questions that choose the probe (initial "
                        "probe, checkpoint, early stop, restart; the authors' protocol, dev:66 with --limit 200); "
                        "with --supervised the probe is trained on those K labels alone. Recorded as "
                        "gold_labels_used in the checkpoint")
    parser.add_argument("--dev_selection", default=TrainSettings.dev_selection, help="DevSelection fields for "
                        "--select dev:K, ';'-separated, e.g. 'init_tries=10;low_accuracy=0.05' (defaults: the authors' "
                        "constants)")
    parser.add_argument("--banked_only", action="store_true", help="train on the banked questions among the first "
                        "--limit only (never decode), e.g. while the bank is still growing")


def settings_from(args) -> TrainSettings:
    return TrainSettings(**lm_eval_settings(args), task=args.task, out=args.out, split=args.split, limit=args.limit,
                         supervised=args.supervised, losses=args.losses, seed=args.seed, bank=args.bank,
                         fit_config=args.fit_config, banked_only=args.banked_only, select=args.select,
                         dev_selection=args.dev_selection)


def run(args) -> int:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # each process would fit its own checkpoint on the same questions
        raise SystemExit(f"lover train runs in one process (WORLD_SIZE={os.environ['WORLD_SIZE']}): start it with "
                         "`lover train ...`, not torchrun / accelerate launch; decoding a large split on several "
                         "GPUs first is `lm_eval --model lover_hf ... bank=PATH` under torchrun, then `lover train "
                         "--bank PATH`.")
    logging.basicConfig(level=logging.INFO)
    from .train import train  # the recipe loads lm-eval, transformers and torch (seconds): only now the command runs

    metadata = train(settings_from(args))
    print(json.dumps({"checkpoint": args.out, "final_losses": metadata["final_losses"]}, indent=2))
    return 0
