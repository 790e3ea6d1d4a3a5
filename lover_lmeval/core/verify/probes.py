"""The plain unsupervised probes LoVer extends, fitted beside it on the same contrast-pair features (Q, N, 2, D):

- ccs: Contrast-Consistent Search (Burns et al. 2022, "Discovering Latent Knowledge in Language Models Without
  Supervision"; EleutherAI/elk): a linear probe p = sigmoid(w . x + b) on each set's mean-centred features, trained
  on consistency (p+ + p- - 1)^2 plus confidence min(p+, p-)^2 only. LoVer's fit with regime=ccs
  (verifier_config.REGIMES): its "nega" term is exactly that loss, summed over a question's branches; Burns et al.'s
  training constants (AdamW, lr 1e-3, weight decay 0.01, 1000 full-batch epochs, 10 tries, the lowest final loss
  kept). LoVer = this probe + the answer-group constraints (intra, inter) + a hidden MLP.
- pca: the first principal direction of the contrast-pair differences (Burns et al.'s "CRC" baseline, reported at
  ~97% of CCS): d = the top eigenvector of the covariance of x~+ - x~- over the real branches (x~ = each set's
  mean-centred features), z = d . (x~+ - x~-) / sd(z); p+ = sigmoid(z), p- = sigmoid(-z), so the branch score
  (p+ + 1 - p-) / 2 = sigmoid(z), monotone in the projection.

Both are oriented as LoVer is (`VerifierConfig.orient`, default "none": the fit's own sign, which for either probe is
arbitrary with respect to truth: CCS's loss is symmetric in p <-> 1 - p, an eigenvector's sign is a convention; the
direction here is signed so that its largest-magnitude coordinate is positive). Scores are stored as
`result.verifier_probs["ccs"]` / `["pca"]` and read by the ccs_* / pca_* rows (select/selection.py SCORES_READ).

Dimensions: Q questions, N branches, D hidden size, R real branches.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import torch
from torch import nn

from .checkpoints import tensors_sha256
from .fit_cache import FITS
from .fit_inputs import normalization_stats
from .scoring import orient_fit, store_scores, task_batch
from .verifier_config import VerifierConfig

#: The probes the test-time fit fits beside LoVer, in this order (their scores' names in `verifier_probs`).
PROBES = ("ccs", "pca")


class DirectionProbe(nn.Module):
    """p+ = sigmoid(z), p- = sigmoid(-z) with z = d . ((x+ - mean+) - (x- - mean-)) / scale; swapped when oriented
    the other way (`orientation` = -1, as `Verifier`'s)."""

    def __init__(self, mean: torch.Tensor, direction: torch.Tensor, scale: float, config: VerifierConfig) -> None:
        super().__init__()
        self.config = config  # verifier_on reads max_dense_gib from it
        self.register_buffer("norm_mean", mean.float().clone())  # (2, D)
        self.register_buffer("direction", direction.float().clone())  # (D,)
        self.register_buffer("scale", torch.tensor(float(scale)))
        self.register_buffer("orientation", torch.ones(()))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., 2, D) -> (p+, p-), each (...)."""
        centred = features.float() - self.norm_mean
        z = (centred[..., 0, :] - centred[..., 1, :]) @ self.direction / self.scale
        p_pos, p_neg = torch.sigmoid(z), torch.sigmoid(-z)
        return (p_pos, p_neg) if self.orientation > 0 else (p_neg, p_pos)


#: Questions whose contrast-pair differences `first_direction` holds in float64 at once: a task's whole set in
#: float64 was 3.8x its features (4.7 GB at 10,000 questions of a 1536-wide model).
DIRECTION_CHUNK = 256


def _differences(features: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """(R, D) float64 contrast-pair differences (x+ - mean+) - (x- - mean-) of the real branches of (Q, N, 2, D)."""
    real = features[mask].double() - mean  # (R, 2, D)
    return real[:, 0] - real[:, 1]


def first_direction(features: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(mean (2, D), d (D,), sd of the projections) of the real branches' contrast-pair differences: d is the unit
    eigenvector of the largest eigenvalue of C = diff^T diff / R, diff = (x+ - mean+) - (x- - mean-) (R, D), whose
    mean is 0 by construction; its sign makes the largest |d_j| positive. In float64: C's spectrum is what decides.
    C and the projections are summed over DIRECTION_CHUNK questions at a time, so memory stays one chunk's."""
    dim = features.shape[-1]
    mean, _ = normalization_stats(features, mask, "mean", dim, chunk=DIRECTION_CHUNK)
    mean64 = mean.double()
    spans = [slice(q, q + DIRECTION_CHUNK) for q in range(0, features.shape[0], DIRECTION_CHUNK)]
    cov = torch.zeros(dim, dim, dtype=torch.float64, device=features.device)  # (D, D)
    for span in spans:
        diff = _differences(features[span], mask[span], mean64)  # (R_chunk, D)
        cov += diff.T @ diff
    _, vectors = torch.linalg.eigh(cov / int(mask.sum()))  # ascending eigenvalues
    d = vectors[:, -1]
    d = d * torch.sign(d[d.abs().argmax()])
    projections = torch.cat([_differences(features[span], mask[span], mean64) @ d for span in spans])  # (R,)
    sd = float(projections.std(unbiased=False))
    return mean.float(), d.float(), sd if sd > 0 else 1.0  # every difference 0 along d: z = 0, every score 0.5


def fit_pca(features: torch.Tensor, mask: torch.Tensor, config: VerifierConfig) -> DirectionProbe:
    """The pca probe of the module docstring, on the real branches of `features` (Q, N, 2, D)."""
    mean, d, sd = first_direction(features, mask)
    return DirectionProbe(mean, d, sd, config).to(features.device)


def ccs_config(config: VerifierConfig) -> VerifierConfig:
    """CCS's fit config: regime=ccs, with the run's orientation rule, seed and memory bound."""
    return VerifierConfig.from_regime("ccs", orient=config.orient, seed=config.seed, max_dense_gib=config.max_dense_gib)


def fit_probes(results, extract: str, config: VerifierConfig | None = None,
               device: str | torch.device | None = None, batch: tuple | None = None) -> dict[str, dict]:
    """Fit every probe of `PROBES` label-free on these results' features, orient it by `config.orient` (LoVer's
    rule), store its scores as `result.verifier_probs[name]`; returns {name: its record} (config, CCS's final
    losses, tensors hash). `batch`: the results' `scoring.task_batch` on `device`, if made already."""
    config = config or VerifierConfig()
    features, mask, groups, answers = batch or task_batch(results, extract, device)
    cfg = ccs_config(config)
    ccs = FITS.fit(features, mask, groups, cfg)
    made = {"ccs": (ccs.verifier, {"config": asdict(cfg), "final_losses": ccs.final_losses}),
            "pca": (fit_pca(features, mask, config), {"config": {"orient": config.orient}})}
    records = {}
    for name in PROBES:
        probe, record = made[name]
        if config.orient != "none":
            record["orient_correlation"] = orient_fit(probe, config.orient, results, extract, features, mask, answers)
        store_scores(results, probe, features, name)
        record["tensors_sha256"] = tensors_sha256(probe.state_dict())
        for result in results:
            result.scored_by[name] = f"test-time {name} fit on {len(results)} questions tensors_sha256:" \
                                     f"{record['tensors_sha256']}"
        records[name] = record
    return records


def neutral_probes(results, why: str) -> None:
    """Every branch scores 0.5 for every probe (nothing to fit: one branch a question), the reason kept per result."""
    for result in results:
        for name in PROBES:
            result.verifier_probs[name] = np.full((len(result.branches), 2), 0.5, dtype=np.float32)
            result.scored_by[name] = why

