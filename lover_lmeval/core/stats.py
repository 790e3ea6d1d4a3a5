"""Statistics on plain arrays: rank correlation, bootstrap intervals, AUROC and calibration.

No model, no lm-eval: the scoring stage (orientation), the diagnostics and the leaderboard all read these.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch


def _average_ranks(values: torch.Tensor) -> torch.Tensor:
    """(R,) ranks 0..R-1 of a 1-D tensor, tied values sharing their mean rank (as Spearman's correlation needs)."""
    _, inverse, counts = torch.unique(values, sorted=True, return_inverse=True, return_counts=True)
    block_end = counts.cumsum(0).double()  # a block of c ties ending at e holds ranks e-c .. e-1
    return (block_end - (counts.double() + 1) / 2)[inverse]


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    """Spearman rank correlation of 1-D tensors (Pearson correlation of their average ranks); 0 if one is constant."""
    rx, ry = _average_ranks(x) - (len(x) - 1) / 2, _average_ranks(y) - (len(y) - 1) / 2
    denominator = float(rx.norm() * ry.norm())
    return float((rx * ry).sum()) / denominator if denominator > 0 else 0.0


def interval_rng(seed: int, *names: str) -> np.random.Generator:
    """The resamples of one bootstrap interval, seeded by the run's seed and the interval's names (task, row[, base]):
    adding a row or a task leaves every other interval as it was (`lover compare`, `lover view`)."""
    return np.random.default_rng([seed, zlib.crc32("/".join(names).encode())])


def bootstrap_interval(correct: np.ndarray, n_boot: int, rng: np.random.Generator) -> tuple[float, float]:
    """95% percentile interval of the mean of 0/1 outcomes, resampling questions."""
    means = correct[rng.integers(0, len(correct), (n_boot, len(correct)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def paired_bootstrap(a: np.ndarray, b: np.ndarray, n_boot: int, rng: np.random.Generator) -> dict:
    """Accuracy difference a - b on the same questions: mean, 95% interval, share of resamples with a <= b."""
    index = rng.integers(0, len(a), (n_boot, len(a)))
    diffs = a[index].mean(axis=1) - b[index].mean(axis=1)
    return {"diff": float(a.mean() - b.mean()), "low": float(np.percentile(diffs, 2.5)),
            "high": float(np.percentile(diffs, 97.5)), "p_not_better": float((diffs <= 0).mean())}


def auroc(scores: np.ndarray, correct: np.ndarray) -> float | None:
    """Area under the ROC curve of `scores` for the 0/1 `correct`; None when one class is missing."""
    scores, correct = np.asarray(scores, dtype=np.float64), np.asarray(correct, dtype=bool)
    pos, neg = scores[correct], scores[~correct]
    if len(pos) == 0 or len(neg) == 0:
        return None
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def expected_calibration_error(probs: np.ndarray, correct: np.ndarray, bins: int = 10) -> float:
    """Σ_b (n_b / n) |mean(correct in b) − mean(p in b)| over equal-width bins of p in [0, 1]."""
    probs, correct = np.asarray(probs, dtype=np.float64), np.asarray(correct, dtype=np.float64)
    index = np.minimum((probs * bins).astype(int), bins - 1)
    return float(sum(abs(correct[index == b].mean() - probs[index == b].mean()) * (index == b).mean()
                     for b in range(bins) if (index == b).any()))
