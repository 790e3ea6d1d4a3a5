"""LoVer verifier: an MLP probe over contrastive features and its training loop (checkpoints: checkpoints.py).

Shapes: ``features`` is ``(Q, N, 2, D)`` (index 0 = x+, 1 = x-), ``mask`` and
``groups`` are ``(Q, N)``; see :mod:`lover_lmeval.core.verify.losses` for the dimension names.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm import tqdm

from .fit_batched import train_together, trains_together
from .fit_inputs import normalization_stats, normalized_inputs
from .fit_steps import FitSteps, cpu_threads_for, make_optimizer
from .loss_spec import total_loss
from .losses import groups_checked, score
# Re-exported: scripts written against the fit's API import its config from here (`from ...verifier import
# VerifierConfig, fit`).
from .verifier_config import REGIMES, VerifierConfig, config_from_string  # noqa: F401


class Verifier(nn.Module):
    """MLP ``D -> hidden -> ... -> 1`` with sigmoid output, applied to x+ and x- alike."""

    def __init__(self, dim: int, config: VerifierConfig | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else VerifierConfig()
        self.dim = dim
        # row 0 = x+ statistics, row 1 = x- statistics; identity until set_normalization
        self.register_buffer("norm_mean", torch.zeros(2, dim))  # (2, D)
        self.register_buffer("norm_std", torch.ones(2, dim))  # (2, D)
        # +1, or -1 once `scoring.orient_by` flipped the fit: forward's p+ and p- then trade places
        self.register_buffer("orientation", torch.ones(()))
        layers: list[nn.Module] = []
        width = dim
        for _ in range(self.config.n_hidden_layers):
            layers += [nn.Linear(width, self.config.hidden), nn.ReLU()]
            width = self.config.hidden
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)
        if self.config.init == "xavier":
            for layer in self.mlp:
                if isinstance(layer, nn.Linear):
                    nn.init.xavier_uniform_(layer.weight)
                    nn.init.zeros_(layer.bias)

    @torch.no_grad()
    def set_normalization(self, features: torch.Tensor, mask: torch.Tensor) -> None:
        """Store normalisation statistics computed from the real branches of a training set."""
        mean, std = normalization_stats(features, mask, self.config.normalize, self.dim)
        self.norm_mean.copy_(mean)
        self.norm_std.copy_(std)

    def normalize(self, features: torch.Tensor) -> torch.Tensor:
        """``(..., 2, D) -> (..., 2, D)`` with the stored statistics."""
        normalized = features.to(self.norm_mean.dtype, copy=True)  # in place below: one copy of a large input
        return normalized.sub_(self.norm_mean).div_(self.norm_std)

    def head(self, normalized: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Probabilities from already-normalised ``(..., 2, D)`` features."""
        p = torch.sigmoid(self.mlp(normalized).squeeze(-1))  # (..., 2)
        return p[..., 0], p[..., 1]

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``features (..., 2, D) -> (p_pos, p_neg)``, each ``(...)``, swapped when the fit was flipped.

        The orientation is applied here, not in :meth:`head`, which the fit loop calls on every step before any
        orientation exists."""
        assert features.shape[-2:] == (2, self.dim), (
            f"features must be (..., 2, {self.dim}), got {tuple(features.shape)}")
        p_pos, p_neg = self.head(self.normalize(features))
        return (p_pos, p_neg) if self.orientation > 0 else (p_neg, p_pos)

    def scores(self, features: torch.Tensor) -> torch.Tensor:
        """Correctness score ``0.5 * (p+ + 1 - p-)`` per branch, shape ``(...)``."""
        return score(*self(features))


@dataclass
class FitResult:
    """What :func:`fit` returns."""

    verifier: Verifier
    """The kept restart, in eval mode, normalisation statistics included."""
    final_losses: dict
    """Its unsupervised terms + ``"total"`` on the full training set (+ ``"supervised"`` with labels)."""
    history: list = field(default_factory=list)
    """One dict per (restart, epoch): question-weighted mean of each training term and ``"total"``."""
    restart_losses: list = field(default_factory=list)
    """Final unsupervised total per restart (NaN for skipped restarts); the minimum was kept."""


def _check_inputs(features, mask, groups, labels, answer_ids) -> None:
    assert features.ndim == 4 and features.shape[2] == 2, (
        f"features must be (Q, N, 2, D), got {tuple(features.shape)}")
    assert mask.shape == features.shape[:2] and mask.dtype == torch.bool, (
        f"mask must be bool (Q, N) = {tuple(features.shape[:2])}, got {mask.dtype} {tuple(mask.shape)}")
    assert groups.shape == features.shape[:2], (
        f"groups must be (Q, N) = {tuple(features.shape[:2])}, got {tuple(groups.shape)}")
    assert labels is None or labels.shape == features.shape[:2], (
        f"labels must be (Q, N) = {tuple(features.shape[:2])}, got {tuple(labels.shape)}")
    assert answer_ids is None or answer_ids.shape == features.shape[:2], (
        f"answer_ids must be (Q, N) = {tuple(features.shape[:2])}, got {tuple(answer_ids.shape)}")
    if not mask.any():
        raise ValueError("mask selects no branch: nothing to train on")
    real = groups[mask]  # checked here once: the training steps skip the loss terms' own check (groups_checked)
    n = features.shape[1]
    assert int(real.min()) >= 0 and int(real.max()) < n, f"group ids of real branches must lie in [0, N={n})"
    # 256 questions at a time: a whole-task boolean copy would cost what the streamed fit saves (fit_inputs.py)
    bad = sum(int((~torch.isfinite(features[q: q + 256][mask[q: q + 256]])).any(dim=(1, 2)).sum())
              for q in range(0, features.shape[0], 256))
    if bad:
        raise ValueError(f"features contain NaN/inf in {bad} real branch(es); "
                         "check the feature extraction (e.g. fp16 overflow) before fitting")


def unsupervised_eval(verifier, normalized, mask, groups, config, answer_ids) -> dict:
    """Full-set unsupervised loss with a fixed representative draw, so restarts are comparable."""
    with torch.no_grad():
        p_pos, p_neg = normalized.head(verifier)
        gen = torch.Generator(device=normalized.device).manual_seed(config.seed)
        total, terms = total_loss(p_pos, p_neg, mask, groups, config.losses, gen, answer_ids=answer_ids,
                                  reduction=config.reduction)
    return {**terms, "total": float(total)}


def train_restart(verifier, normalized, mask, groups, labels, answer_ids, spec, config, gen,
                  after_epoch: Callable[[int], bool] | None = None) -> list[dict] | None:
    """Optimise one initialisation; per-epoch mean loss terms, or None on a non-finite loss.
    ``after_epoch(epoch)`` returning True stops early (dev-label selection, dev_select.py). The steps' shared work
    is done once (fit_steps.py)."""
    opt = make_optimizer(verifier, config)
    n_q = normalized.shape[0]
    steps = FitSteps(normalized, mask, groups, labels, answer_ids, spec, config)
    history = []
    # resample_every=1 draws inside every step (total_loss); longer periods keep one draw, as the authors' code does
    draws = steps.draw(gen) if config.resample_every > 1 else None
    # _check_inputs checked the groups once; a small step runs on one CPU thread (fit_steps.ONE_THREAD_BELOW)
    with groups_checked(), cpu_threads_for(steps.step_floats(), normalized.device):
        for epoch in range(config.epochs):
            if draws is not None and epoch > 0 and (epoch + 1) % config.resample_every == 0:
                draws = steps.draw(gen)
            sums: dict[str, float] = {}
            # drawn even when a full batch goes in question order: the generator's stream, and so every later
            # draw, stays what it always was
            order = torch.randperm(n_q, generator=gen)
            for idx in steps.batches(order):
                loss, terms = steps.loss(verifier, idx, draws, gen)
                total = float(loss.detach())
                if not math.isfinite(total):
                    return None
                opt.zero_grad()
                loss.backward()
                opt.step()
                share = (n_q if idx is None else len(idx)) / n_q
                for k, v in {**terms, "total": total}.items():  # question-weighted epoch mean
                    sums[k] = sums.get(k, 0.0) + v * share
            history.append({"epoch": epoch, **sums})
            if after_epoch is not None and after_epoch(epoch):
                break
    return history


def seeded_verifier(config: VerifierConfig, seed: int, mean: torch.Tensor, std: torch.Tensor) -> Verifier:
    """A fresh probe initialised from `seed` (without touching the global RNG), carrying the normalisation."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        verifier = Verifier(mean.shape[-1], config).to(mean.device, mean.dtype)  # float64: a reference fit
    verifier.load_state_dict({**verifier.state_dict(), "norm_mean": mean, "norm_std": std})
    return verifier


def fit(features: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor,
        config: VerifierConfig | None = None, labels: torch.Tensor | None = None,
        answer_ids: torch.Tensor | None = None) -> FitResult:
    """Train a verifier; with ``labels`` the loss is the supervised BCE ceiling instead of ``config.losses``.
    ``answer_ids`` (Q, N): the same id for the same answer string in any question, -1 for none; needed only by
    the ``balance`` loss term.

    Either way the kept restart is the one with the lowest final *unsupervised* loss
    (``config.losses`` on the whole training set), never one chosen by labels.

    The fit runs on the device of ``features`` (the other tensors must be there too): a GPU when the caller puts the
    features on the model's. Its training steps draw from CPU generators: the same draws on any device.
    """
    config = config if config is not None else VerifierConfig()
    _check_inputs(features, mask, groups, labels, answer_ids)
    spec = "supervised" if labels is not None else config.losses
    normalized, mean, std = normalized_inputs(features, mask, config)
    seeds = torch.randint(0, 2**62, (config.restarts,), generator=torch.Generator().manual_seed(config.seed)).tolist()
    verifiers = [seeded_verifier(config, rseed, mean, std) for rseed in seeds]
    if trains_together(config, labels, features.shape[0]):  # a linear probe's tries as one (fit_batched.py)
        trained = iter(train_together(verifiers, normalized, mask, groups, answer_ids, config))
    else:
        trained = (train_restart(verifier, normalized, mask, groups, labels, answer_ids, spec, config,
                                 torch.Generator().manual_seed(rseed + 1)) for verifier, rseed in zip(verifiers, seeds))
    best, best_final, history, restart_losses = None, None, [], []
    for restart, verifier in enumerate(tqdm(verifiers, desc="fitting verifier (restarts)", leave=False)):
        rows = next(trained)
        final = (unsupervised_eval(verifier, normalized, mask, groups, config, answer_ids)
                 if rows is not None else {})
        if labels is not None and rows is not None:
            with torch.no_grad():
                sup, _ = total_loss(*normalized.head(verifier), mask, groups, "supervised", labels=labels)
            final["supervised"] = float(sup)
        if rows is None or not all(math.isfinite(v) for v in final.values()):
            warnings.warn(f"verifier restart {restart} hit a non-finite loss; skipping it")
            restart_losses.append(math.nan)
            continue
        history += [{"restart": restart, **row} for row in rows]
        restart_losses.append(final["total"])
        if best_final is None or final["total"] < best_final["total"]:
            best, best_final = verifier, final
    if best is None:
        raise RuntimeError(f"all {config.restarts} verifier restart(s) hit a non-finite loss; "
                           "try a lower lr or normalize='meanstd', and check the features for extreme values")
    best.eval()
    return FitResult(best, best_final, history, restart_losses)
