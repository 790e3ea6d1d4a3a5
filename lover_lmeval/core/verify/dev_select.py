"""Dev-label selection (`lover train --select dev:K`): K gold-labelled dev questions choose the probe.

This path **uses gold labels**: K of them, on dev questions cut from the training split (never the test split),
and says so wherever its output goes: the checkpoint records `gold_labels_used: K` and the dev question ids, and
the rows a leaderboard scores with it carry `[devK]` in their names. The fit's objective stays label-free; the
labels only choose, as in the authors' public code (method.py, read, not copied):

1. initial probe: at least `init_tries` random initialisations, the best by dev accuracy, going on until one
   reaches `init_threshold` (here at most `max_init_tries`; their loop has no cap);
2. checkpoint: every `validate_every` epochs the dev accuracy is measured and the best state is kept;
3. early stop: a try stops after more than `patience` validations without a new best (default
   epochs / 4 / validate_every); a try whose dev accuracy was below `low_accuracy` at more than
   `low_accuracy_limit` validations is abnormal and redone (here at most `max_abnormal` times);
4. restarts: of `VerifierConfig.restarts` normal tries, the one with the best dev accuracy is kept.

Dev accuracy is LoVer(max)'s: whether the highest-scored branch (ties: the lowest index) gives the gold answer.

Dimensions: Q training questions, K dev questions, N branches, D hidden size.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

import torch

from .fit_inputs import normalized_inputs
from .verifier import FitResult, Verifier, seeded_verifier, train_restart, unsupervised_eval
from .verifier_config import VerifierConfig, fields_from_string


class NoProbeSelected(RuntimeError):
    """Every try stayed below the selection's dev-accuracy floor (or diverged): on these dev questions no probe
    reaches the accuracy the authors' protocol requires, so it has no probe to keep."""


@dataclass
class DevSelection:
    """How the dev labels choose the probe (the authors' constants as defaults)."""

    init_tries: int = 30
    """Random initialisations tried at least, per try."""
    init_threshold: float = 0.15
    """Initialisations continue until one has at least this dev accuracy (or `max_init_tries`)."""
    max_init_tries: int = 300
    """Cap on initialisations per try."""
    validate_every: int = 10
    """Epochs between dev evaluations (checkpointing, early stop)."""
    patience: int = 0
    """Validations without a new best before a try stops; 0 = epochs / 4 / validate_every."""
    low_accuracy: float = 0.1
    """A validation below this dev accuracy counts towards an abnormal try."""
    low_accuracy_limit: int = 30
    """More low validations than this make a try abnormal (redone, not counted)."""
    max_abnormal: int = 10
    """Abnormal tries allowed before the fit gives up."""

    def __post_init__(self) -> None:
        for name in ("init_tries", "max_init_tries", "validate_every"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        for name in ("patience", "low_accuracy_limit", "max_abnormal"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {getattr(self, name)!r}")


def selection_from_string(text: str) -> DevSelection:
    """``"low_accuracy=0.05;init_tries=10"`` -> DevSelection (``lover train --dev_selection``)."""
    return DevSelection(**fields_from_string(DevSelection, text, "init_tries=30;low_accuracy=0.1", "--dev_selection"))


def parse_select(text: str | None) -> int:
    """`--select` value -> K (0 for label-free selection). Accepts "none" and "dev:K" with K >= 1."""
    if text in (None, "", "none"):
        return 0
    kind, _, count = str(text).partition(":")
    if kind != "dev" or not count.isdigit() or int(count) < 1:
        raise ValueError(f"--select {text!r} must be 'none' or 'dev:K' with K >= 1 labelled dev questions, "
                         "e.g. dev:66 (the authors' 200 + 66)")
    return int(count)


@torch.no_grad()
def dev_accuracy(verifier: Verifier, features: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> float:
    """Share of dev questions whose highest-scored real branch is right; features (K, N, 2, D), labels (K, N)."""
    scores = verifier.scores(features).masked_fill(~mask, float("-inf"))  # (K, N)
    return float(labels.gather(1, scores.argmax(dim=1, keepdim=True)).mean())


def fit_with_dev(features: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor, dev_features: torch.Tensor,
                 dev_mask: torch.Tensor, dev_labels: torch.Tensor, config: VerifierConfig | None = None,
                 selection: DevSelection | None = None,
                 answer_ids: torch.Tensor | None = None) -> tuple[FitResult, dict]:
    """The label-free objective on the training questions, every choice made by dev accuracy (module docstring).
    Returns the fit and a report: the dev accuracy of the kept probe and of every try."""
    config = config or VerifierConfig()
    selection = selection or DevSelection()
    normalized, mean, std = normalized_inputs(features, mask, config)  # (Q, N, 2, D)
    seeds = torch.Generator().manual_seed(config.seed)

    def next_seed() -> int:
        return int(torch.randint(0, 2**62, (1,), generator=seeds))

    def initial_probe() -> tuple[Verifier, float, int]:
        best, best_accuracy, tried = None, -1.0, 0
        while tried < selection.init_tries or (best_accuracy < selection.init_threshold
                                               and tried < selection.max_init_tries):
            candidate = seeded_verifier(config, next_seed(), mean, std)
            accuracy = dev_accuracy(candidate, dev_features, dev_mask, dev_labels)
            tried += 1
            if accuracy > best_accuracy:
                best, best_accuracy = candidate, accuracy
        return best, best_accuracy, tried

    patience = selection.patience or max(1, config.epochs // 4 // selection.validate_every)
    kept, kept_accuracy, tries, history, abnormal = None, -1.0, [], [], 0
    while len(tries) < config.restarts:
        verifier, init_accuracy, init_tried = initial_probe()
        track = {"best": -1.0, "state": None, "since": 0, "low": 0, "epoch": -1}

        def after_epoch(epoch: int) -> bool:
            if epoch != 0 and (epoch + 1) % selection.validate_every != 0:
                return False
            accuracy = dev_accuracy(verifier, dev_features, dev_mask, dev_labels)
            if accuracy > track["best"]:
                track.update(best=accuracy, state=copy.deepcopy(verifier.state_dict()), since=0, epoch=epoch)
            else:
                track["since"] += 1
            track["low"] += accuracy < selection.low_accuracy
            return track["low"] > selection.low_accuracy_limit or track["since"] > patience

        rows = train_restart(verifier, normalized, mask, groups, None, answer_ids, config.losses, config,
                             torch.Generator().manual_seed(next_seed()), after_epoch)
        if rows is None or track["state"] is None or track["low"] > selection.low_accuracy_limit:
            abnormal += 1
            if abnormal > selection.max_abnormal:
                raise NoProbeSelected(f"dev-label selection: {abnormal} abnormal tries (dev accuracy below "
                                      f"{selection.low_accuracy} or a non-finite loss); no probe to keep")
            continue
        verifier.load_state_dict(track["state"])
        history += [{"restart": len(tries), **row} for row in rows]
        tries.append({"dev_accuracy": track["best"], "best_epoch": track["epoch"], "epochs_run": len(rows),
                      "initial_dev_accuracy": init_accuracy, "initialisations_tried": init_tried})
        if track["best"] > kept_accuracy:
            kept, kept_accuracy = verifier, track["best"]
    kept.eval()
    final = unsupervised_eval(kept, normalized, mask, groups, config, answer_ids)
    report = {"dev_accuracy": kept_accuracy, "tries": tries, "abnormal_tries": abnormal,
              "selection": asdict(selection)}
    return FitResult(kept, final, history), report
