"""What the `lover train` and `lover compare` recipes run with: one dataclass each, every default defined here.

Plain data, no import beyond the standard library: the commands' parsers read their defaults from these classes, and
`lover <subcommand> --help` must not wait for torch or lm-eval (tests/test_cli_help.py). The checks that need a
task's documents or the core's parsers (a split's name, `--select dev:K`, a fit config) run in the recipes, before the
model loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROWS_VERIFIERS = ("lover", "supervised", "supervised_cv")  # verifier names taken by `lover compare`'s built-in rows


@dataclass(kw_only=True)
class LmEvalSettings:
    """What `lover train` and `lover compare` hand lm-eval, under lm_eval's own option names."""

    model_args: str = ""
    """lover_hf's model args, e.g. "gguf_file=...,layer=12,bank=..."."""
    include_path: str | None = None
    """Another folder of task YAMLs; the packaged lover_* tasks are always found."""
    apply_chat_template: bool = False
    """Prompts through the tokenizer's chat template, as lm_eval's flag (a bank's prompts must match)."""
    gen_kwargs: str = ""
    """Overrides of the task's generation kwargs, e.g. "max_gen_toks=128"."""


@dataclass(kw_only=True)
class TrainSettings(LmEvalSettings):
    """`lover train`: decode a task's split (through the bank), fit a verifier on it, write the checkpoint."""

    task: str
    """The lm-eval task whose documents are decoded, e.g. "lover_gsm8k"."""
    out: Path
    """The checkpoint (.safetensors); its .json, .report.json and .losses.png are written beside it."""
    split: str = "train"
    """The task's split to decode (its own split names)."""
    limit: int | None = None
    """The first `limit` documents of the split (all when None)."""
    supervised: bool = False
    """The ceiling baseline: BCE on gold correctness, so gold targets are read."""
    losses: str | None = None
    """'+'-separated loss terms; None keeps the fit config's own (VerifierConfig's default, or its regime's)."""
    seed: int = 0
    """Seed of the fit (initialisation, batching, restarts); VerifierConfig's default, repeated without importing it."""
    bank: str | None = None
    """The branch bank file; None: one per task and split in the lover-lmeval cache dir."""
    fit_config: str = ""
    """More VerifierConfig fields, ';'-separated, e.g. "curriculum=0.2;epochs=60"."""
    banked_only: bool = False
    """Train on the banked questions among the first `limit` only, decoding none."""
    select: str = "none"
    """"none" (label-free) or "dev:K": the K documents after the first `limit` are gold-labelled dev questions
    that choose the probe (dev_select.py); with `supervised` the probe is trained on their labels alone."""
    dev_selection: str = ""
    """DevSelection fields for select="dev:K", ';'-separated, e.g. "init_tries=10;low_accuracy=0.05"."""

    def __post_init__(self) -> None:
        self.out = Path(self.out)


@dataclass(kw_only=True)
class CompareSettings(LmEvalSettings):
    """`lover compare`: every task through lm-eval once, then the leaderboard and its logs."""

    tasks: list[str]
    """The lm-eval tasks to evaluate, in the leaderboard's column order."""
    out: Path
    """The output folder: leaderboard.md / .json, per_question.jsonl, branches.jsonl and the plots."""
    limit: int | None = None
    """The first `limit` documents of each task (all when None)."""
    n_boot: int = 2000
    """Bootstrap resamples per interval."""
    seed: int = 0
    """Seed of the bootstrap (with each interval's task and row names: one row's interval never depends on the other
    rows) and of the supervised cross-fit."""
    layers: list[int] = field(default_factory=list)
    """Feature layers of a label-free layer sweep (none: no sweep)."""
    cv_folds: int = 2
    """Folds of the cross-fitted supervised ceiling (rows supervised_cv_*); under 2 skips it."""
    checkpoints: dict[str, str] = field(default_factory=dict)
    """More verifiers scored on the same features, name -> checkpoint path; each adds rows NAME_max / NAME_sum."""

    def __post_init__(self) -> None:
        self.tasks, self.layers, self.out = list(self.tasks), list(self.layers), Path(self.out)
        taken = [name for name in self.checkpoints if not name or name in ROWS_VERIFIERS]
        if taken:
            raise ValueError(f"checkpoint names {taken} (--verifiers NAME=PATH) must be non-empty and other than "
                             f"{', '.join(ROWS_VERIFIERS)}, whose rows are built in; e.g. "
                             "trained=verifier_ckpts/m/gsm8k.safetensors")


def add_lm_eval_arguments(parser) -> None:
    """The options `lover train` and `lover compare` share with lm_eval."""
    parser.add_argument("--model_args", default=LmEvalSettings.model_args,
                        help="lover_hf model args, e.g. gguf_file=...,layer=12,bank=...")
    parser.add_argument("--include_path", default=LmEvalSettings.include_path,
                        help="another folder of task YAMLs, as lm_eval's (the packaged lover_* tasks are always found)")
    parser.add_argument("--apply_chat_template", action="store_true", help="as lm_eval's (match the bank's prompts)")
    parser.add_argument("--gen_kwargs", default=LmEvalSettings.gen_kwargs,
                        help="override the task's generation kwargs, e.g. max_gen_toks=128")


def lm_eval_settings(args) -> dict:
    """The shared options of a parsed command line, as keyword arguments of either recipe's settings."""
    return {"model_args": args.model_args, "include_path": args.include_path,
            "apply_chat_template": args.apply_chat_template, "gen_kwargs": args.gen_kwargs}
