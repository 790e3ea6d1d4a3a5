"""LoVer verifier: an MLP probe over contrastive features and its training loop (checkpoints: checkpoints.py).

Shapes: ``features`` is ``(Q, N, 2, D)`` (index 0 = x+, 1 = x-), ``mask`` and
``groups`` are ``(Q, N)``; see :mod:`lover_lmeval.core.losses` for the dimension names.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from tqdm import tqdm

from .fit_inputs import normalization_stats, normalized_inputs
from .losses import REDUCTIONS, parse_loss_spec, sample_pairs, sample_representatives, score, total_loss

NORMALIZE_CHOICES = ("none", "mean", "meanstd")
ORIENT_CHOICES = ("none", "vote", "confidence")
INIT_CHOICES = ("default", "xavier")
#: Named starting points for VerifierConfig (`regime=NAME` in a fit config; later keys override single fields).
REGIMES = {
    "ours": {},
    # The authors' public code (method.py, train.sh), read field by field: one hidden layer of 100 with Xavier
    # weights and zero biases, raw features, AdamW lr 1e-5 for 5000 full-batch epochs, the representative
    # reductions (losses_authors.py) with group representatives re-drawn every 2000 epochs, and the staged schedule
    # at 0.2. Their feature layer is the last one (`--layer -1`): pass layer=-1 in the model args for that.
    "authors": {"n_hidden_layers": 1, "hidden": 100, "init": "xavier", "normalize": "none", "lr": 1e-5,
                "epochs": 5000, "batch_questions": 0, "losses": "nega+intra+inter_raw",
                "reduction": "representative", "resample_every": 2000, "curriculum": 0.2},
}


@dataclass
class VerifierConfig:
    """Verifier architecture and training hyperparameters.

    The paper's lr 1e-5 barely moves the MLP in the few hundred AdamW steps we can
    afford on CPU.  Measured on the planted-direction data of ``tests/test_verifier.py``
    (held-out "best group is the true group" accuracy; majority vote gets 0.41):
    lr 1e-4 x 30 epochs stayed near chance (0.29 at D=64, 0.43 at D=896).  At D=256,
    500 train questions, signal 0.4, mean over 3 random worlds, 1 restart: lr 1e-3 x 30
    epochs 0.70, 3e-3 x 30 epochs 0.89, 3e-3 x 40 epochs 0.91 (0.93 with 3 restarts),
    3e-3 x 100 epochs 0.93, 1e-2 x 30 epochs 0.92.  On 6 further worlds, with 3e-3:
    30 epochs x 3 restarts 0.941, 40 x 3 0.949, 40 x 2 0.932.  The defaults (3e-3,
    40 epochs, 64 questions/step, 3 restarts) are the best of those near the CPU budget
    of ``benchmarks/bench_fit.py`` (1000 questions x 10 branches, D=896); 30 epochs
    is 25% cheaper for ~0.01 accuracy.
    """

    hidden: int = 100
    """Width of each hidden layer (paper: 100)."""
    n_hidden_layers: int = 2
    """Number of ReLU hidden layers (paper: 2); 0 gives a linear probe."""
    normalize: str = "mean"
    """Input normalisation, statistics from the training set, stored in the checkpoint.
    ``"none"``: raw features.  ``"mean"``: subtract the x+ mean from x+ and the x- mean from
    x- separately (as CCS does, so the probe cannot read the template token), then divide both by
    one shared scalar, the RMS of the centred features, giving unit RMS per dimension.  The scalar
    keeps directions intact but makes lr independent of the LLM's activation scale (norms 10-1000).
    ``"meanstd"``: centre each set separately and divide each dimension by its own std."""
    losses: str = "nega+intra+inter"
    """Unsupervised loss spec (see ``losses.parse_loss_spec``); also the restart-selection criterion."""
    lr: float = 3e-3
    """AdamW learning rate (on ``"mean"``/``"meanstd"``-normalised, unit-RMS inputs)."""
    epochs: int = 40
    """Passes over the training questions per restart."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    restarts: int = 3
    """Independent initialisations; the one with the lowest final unsupervised loss is kept."""
    seed: int = 0
    """Seed for initialisation, batching and representative sampling."""
    curriculum: float = 0.0
    """Staged training (the authors' code uses 0.2): while a batch's inter-group term exceeds this, only it
    is optimised, then negation + intra-group until negation is below it, then all terms
    (``losses.staged_terms``). 0 optimises all terms from the first step."""
    orient: str = "none"
    """Label-free orientation after the fit (``scoring.orient_by``): flip the verifier (swap p+ and p-, i.e.
    score -> 1 - score) when its branch scores fall as a per-branch signal rises (Spearman < 0 over the training
    branches). The paper's objective does not fix which way a fit that ends near "every answer false" or at p = 0.5
    ranks the branches (label-free AUROC 0.15-0.43 in benchmarks/RESULTS.md runs 3-4). ``"vote"``: the share of the
    question's branches giving the same answer; it inherits the vote's bias and flips fits that rightly overrule it
    (BBH boolean_expressions 0.63 -> 0.37). ``"confidence"``: CoT-decoding's answer-span margin; right in 16 of 18
    fits on the sets it was designed on (RESULTS.md run 5) but 8 of 14 on held-out sets (run 6), so neither
    is a default. ``"none"`` (default): the paper's method."""
    batch_questions: int = 64
    """Questions per optimisation step; 0 means full batch.  Mini-batches converge in fewer
    FLOPs: at D=896, 1000 questions, signal 0.4, lr 1e-3, 100 full-batch steps reached 0.84
    while 30 epochs of 64-question batches (30 full batches' worth of FLOPs) reached 0.97."""
    init: str = "default"
    """Probe initialisation: ``"default"`` (PyTorch's), ``"xavier"`` (Xavier-uniform weights, zero biases; the
    authors' code)."""
    reduction: str = "all"
    """How the loss terms reduce over branches (``losses.REDUCTIONS``): ``"all"``, the paper's equations (every
    branch, every pair), or ``"representative"``, the authors' code (one random representative or pair per group,
    pooled means, inter-group averaged within buckets of equal group count; ``losses_authors.py``)."""
    resample_every: int = 1
    """Epochs between draws of group representatives (and pairs): 1 draws anew at every step; the authors' code
    keeps one draw for 2000 epochs."""
    max_dense_gib: float = 2.0
    """Largest float32 copy of the normalised training inputs (GiB) a fit keeps. Above it (e.g. 12k questions of a
    4096-wide model: 3.7 GiB) each step normalises its batch of questions from the stored features instead, so the
    fit holds the stored copy (half precision for a half model) plus one batch (`fit_inputs.NormalizedInputs`)."""
    regime: str = "ours"
    """The preset (``REGIMES``) the other fields started from, recorded for provenance; set it through
    ``config_from_string("regime=authors;...")`` or :meth:`from_regime`, which apply the preset's fields."""

    @classmethod
    def from_regime(cls, regime: str, **overrides) -> VerifierConfig:
        """The named preset (``REGIMES``) with single fields overridden."""
        if regime not in REGIMES:
            raise ValueError(f"regime={regime!r} is unknown; use one of {', '.join(REGIMES)}")
        return cls(**{**REGIMES[regime], **overrides, "regime": regime})

    def __post_init__(self) -> None:
        for name in ("hidden", "epochs", "restarts"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("n_hidden_layers", "seed", "batch_questions", "resample_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if self.orient not in ORIENT_CHOICES:
            raise ValueError(f"orient must be one of {', '.join(ORIENT_CHOICES)}, got {self.orient!r}")
        if self.init not in INIT_CHOICES:
            raise ValueError(f"init must be one of {', '.join(INIT_CHOICES)}, got {self.init!r}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {self.reduction!r}")
        if self.regime not in REGIMES:
            raise ValueError(f"regime must be one of {', '.join(REGIMES)}, got {self.regime!r}")
        if self.resample_every < 1:
            raise ValueError(f"resample_every must be an integer >= 1, got {self.resample_every!r}")
        if self.normalize not in NORMALIZE_CHOICES:
            raise ValueError(f"normalize must be one of {', '.join(NORMALIZE_CHOICES)}, got {self.normalize!r}")
        if not (isinstance(self.max_dense_gib, (int, float)) and self.max_dense_gib >= 0):
            raise ValueError(f"max_dense_gib must be a number >= 0, got {self.max_dense_gib!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        if not (isinstance(self.curriculum, (int, float)) and math.isfinite(self.curriculum)
                and self.curriculum >= 0):
            raise ValueError(f"curriculum must be a finite number >= 0 (0 = off), got {self.curriculum!r}")
        if not (isinstance(self.weight_decay, (int, float)) and math.isfinite(self.weight_decay)
                and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay!r}")
        try:
            terms = parse_loss_spec(self.losses)
        except ValueError as err:
            raise ValueError(f"losses: {err}") from None
        if "supervised" in terms:
            raise ValueError("losses must only name unsupervised terms (nega, intra, inter, inter_raw, inter_logic, "
                             "balance); supervised training is selected by passing labels to fit()")


def fields_from_string(cls, text: str, example: str, what: str = "config") -> dict:
    """``"key=value;key=value"`` -> keyword arguments for the dataclass ``cls`` (``;``-separated, because lm-eval
    splits ``--model_args`` on commas); each value is converted to the type of the field's default."""
    defaults = asdict(cls())
    kwargs = {}
    for item in filter(None, (part.strip() for part in str(text).split(";"))):
        key, sep, value = (x.strip() for x in item.partition("="))
        if not sep or key not in defaults:
            raise ValueError(f"{what} item {item!r} must be key=value with key one of {', '.join(defaults)}; "
                             f"e.g. {example!r}")
        if key in kwargs:
            raise ValueError(f"{what} sets {key} twice in {text!r}; give it once")
        try:
            kwargs[key] = type(defaults[key])(value)
        except ValueError:
            raise ValueError(f"{what} {key}={value!r}: expected {type(defaults[key]).__name__}") from None
    return kwargs


def config_from_string(text: str) -> VerifierConfig:
    """``"losses=intra+inter;curriculum=0.2"`` -> VerifierConfig (:func:`fields_from_string`). ``regime=NAME``
    starts from that preset (``REGIMES``), wherever it stands; the other keys override its fields."""
    kwargs = fields_from_string(VerifierConfig, text, "losses=nega+intra+inter_raw;curriculum=0.2", "fit config")
    return VerifierConfig.from_regime(kwargs.pop("regime", "ours"), **kwargs)


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


def _draw(groups, mask, gen) -> dict:
    """One draw of group representatives and pairs for every question (kept across epochs: resample_every)."""
    return {"reps": sample_representatives(groups, mask, gen), "pairs": sample_pairs(groups, mask, gen)}


def _rows(draws: dict | None, idx: torch.Tensor) -> dict | None:
    """The draws of the questions `idx` (each draw is a tuple of (Q, G) tensors)."""
    return None if draws is None else {name: tuple(t[idx] for t in draw) for name, draw in draws.items()}


def train_restart(verifier, normalized, mask, groups, labels, answer_ids, spec, config, gen,
                  after_epoch: Callable[[int], bool] | None = None) -> list[dict] | None:
    """Optimise one initialisation; per-epoch mean loss terms, or None on a non-finite loss.
    ``after_epoch(epoch)`` returning True stops early (dev-label selection, dev_select.py)."""
    opt = torch.optim.AdamW(verifier.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    n_q = normalized.shape[0]
    history = []
    # resample_every=1 draws inside every step (total_loss); longer periods keep one draw, as the authors' code does
    draws = _draw(groups, mask, gen) if config.resample_every > 1 else None
    for epoch in range(config.epochs):
        if draws is not None and epoch > 0 and (epoch + 1) % config.resample_every == 0:
            draws = _draw(groups, mask, gen)
        sums: dict[str, float] = {}
        for idx in torch.randperm(n_q, generator=gen).to(normalized.device).split(config.batch_questions or n_q):
            p_pos, p_neg = verifier.head(normalized[idx])
            loss, terms = total_loss(p_pos, p_neg, mask[idx], groups[idx], spec, gen,
                                     None if labels is None else labels[idx],
                                     curriculum=0.0 if labels is not None else config.curriculum,
                                     answer_ids=None if answer_ids is None else answer_ids[idx],
                                     reduction=config.reduction, draws=_rows(draws, idx))
            if not torch.isfinite(loss):
                return None
            opt.zero_grad()
            loss.backward()
            opt.step()
            for k, v in {**terms, "total": float(loss.detach())}.items():  # question-weighted epoch mean
                sums[k] = sums.get(k, 0.0) + v * len(idx) / n_q
        history.append({"epoch": epoch, **sums})
        if after_epoch is not None and after_epoch(epoch):
            break
    return history


def seeded_verifier(config: VerifierConfig, seed: int, mean: torch.Tensor, std: torch.Tensor) -> Verifier:
    """A fresh probe initialised from `seed` (without touching the global RNG), carrying the normalisation."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        verifier = Verifier(mean.shape[-1], config).to(mean.device)
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
    """
    config = config if config is not None else VerifierConfig()
    _check_inputs(features, mask, groups, labels, answer_ids)
    spec = "supervised" if labels is not None else config.losses
    normalized, mean, std = normalized_inputs(features, mask, config)
    seeds = torch.randint(0, 2**62, (config.restarts,), generator=torch.Generator().manual_seed(config.seed))
    best, best_final, history, restart_losses = None, None, [], []
    for restart, rseed in enumerate(tqdm(seeds.tolist(), desc="fitting verifier (restarts)", leave=False)):
        verifier = seeded_verifier(config, rseed, mean, std)
        rows = train_restart(verifier, normalized, mask, groups, labels, answer_ids, spec, config,
                              torch.Generator().manual_seed(rseed + 1))
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
