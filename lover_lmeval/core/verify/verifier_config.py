"""The verifier's configuration: `VerifierConfig` (one field per choice, validated on construction), the named
regimes it can start from (`regime=authors`), and the ``key=value;...`` strings that set it from model args.

The probe and its fit that read it are in verifier.py.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .loss_spec import parse_loss_spec
from .losses import REDUCTIONS

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
    # CCS (Burns et al. 2022): a linear probe on the negation-consistency + confidence loss alone ("nega"), trained as
    # their code trains it (AdamW lr 1e-3, weight decay 0.01, 1000 full-batch epochs, 10 tries, the lowest final
    # loss kept) on each set's mean-centred features; the ccs_* rows' probe (probes.py).
    "ccs": {"n_hidden_layers": 0, "losses": "nega", "lr": 1e-3, "weight_decay": 0.01, "epochs": 1000,
            "batch_questions": 0, "restarts": 10, "normalize": "mean"},
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
    of ``benchmarks/performance/bench_fit.py`` (1000 questions x 10 branches, D=896); 30 epochs
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
    """Unsupervised loss spec (see ``loss_spec.parse_loss_spec``); also the restart-selection criterion."""
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
    (``loss_spec.staged_terms``). 0 optimises all terms from the first step."""
    orient: str = "none"
    """Label-free orientation after the fit (``scoring.orient_by``): flip the verifier (swap p+ and p-, i.e.
    score -> 1 - score) when its branch scores fall as a per-branch signal rises (Spearman < 0 over the training
    branches). The paper's objective does not fix which way a fit that ends near "every answer false" or at p = 0.5
    ranks the branches (label-free AUROC 0.15-0.43 in benchmarks/runs/run03_gpu_gsm8k400_hotpotqa_bbh.md and
    run04_igsm_mmlu_pro_decoding.md). ``"vote"``: the share of the question's branches giving the same answer; it
    inherits the vote's bias and flips fits that rightly overrule it (BBH boolean_expressions 0.63 -> 0.37). ``"confidence"``: CoT-decoding's answer-span margin; right in 16 of 18
    fits on the sets it was designed on (benchmarks/runs/run05_orientation.md) but 8 of 14 on held-out sets
    (run06_orientation_held_out.md), so neither is a default. ``"none"`` (default): the paper's method."""
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
