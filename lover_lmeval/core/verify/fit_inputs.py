"""The fit's inputs: normalisation statistics and the normalised features, whole or streamed.

A fit normalises its (Q, N, 2, D) features once, with statistics from the real branches. For a task whose float32
copy would exceed ``VerifierConfig.max_dense_gib`` (12k questions of a 4096-wide model: 3.7 GiB), the statistics are
taken in two passes over chunks of questions and each step normalises only its own batch, from the stored features
(half precision for a half-precision model, results.py), so the fit holds one stored copy plus one batch.

Dimensions: Q questions, N branches, D hidden size; R real (unpadded) branches.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ...log import log


def fit_dtype(features: torch.Tensor) -> torch.dtype:
    """The dtype a fit computes in: float32, whatever the features' (bf16, float16, float32), except float64 features,
    which are fitted in float64: a reference run, both sides of a test held to float64's rounding."""
    return torch.float64 if features.dtype == torch.float64 else torch.float32


@torch.no_grad()
def normalization_stats(features: torch.Tensor, mask: torch.Tensor, mode: str, dim: int,
                        chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, std)``, each ``(2, D)`` (row 0 = x+, row 1 = x-), from the real branches; with ``chunk``, two passes
    over ``chunk`` questions at a time in float64 (no float32 copy of the whole set)."""
    if mode == "none":
        return torch.zeros(2, dim, dtype=fit_dtype(features)), torch.ones(2, dim, dtype=fit_dtype(features))
    if chunk is not None:
        return _streamed_stats(features, mask, mode, chunk)
    real = features[mask].to(fit_dtype(features))  # (R, 2, D), R = real branches
    mean = real.mean(dim=0)  # (2, D)
    centred = real - mean  # (R, 2, D)
    if mode == "mean":
        std = centred.pow(2).mean().sqrt().expand(2, dim)  # (2, D), one shared scalar
    else:
        std = centred.std(dim=0, unbiased=False)  # (2, D)
    return mean, std.clamp(min=1e-6)  # constant dimensions would divide by zero


def _streamed_stats(features, mask, mode: str, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`normalization_stats` over ``chunk`` questions at a time: the same statistics up to rounding."""
    spans = [(features[q: q + chunk], mask[q: q + chunk]) for q in range(0, features.shape[0], chunk)]
    count = sum(int(m.sum()) for _, m in spans)
    mean = sum(f[m].double().sum(dim=0) for f, m in spans) / count  # (2, D)
    squares = sum(((f[m].double() - mean) ** 2).sum(dim=0) for f, m in spans)  # (2, D)
    if mode == "mean":
        std = (squares.sum() / squares.numel() / count).sqrt().expand(2, features.shape[-1])  # one shared scalar
    else:
        std = (squares / count).sqrt()
    return mean.to(fit_dtype(features)), std.to(fit_dtype(features)).clamp(min=1e-6)


class NormalizedInputs:
    """A fit's inputs ``(Q, N, 2, D)``, normalised: padding zeroed (it may hold garbage, and NaN * 0 is NaN in matmul
    gradients), then ``(x - mean) / std`` in float32.

    Kept as one float32 tensor when that fits in ``max_dense_gib``; otherwise each access normalises only the
    questions it asks for from the stored features, so a large task's fit holds the stored copy plus one batch."""

    def __init__(self, features: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
                 chunk: int | None) -> None:
        self.shape, self.device = features.shape, features.device
        self.mean, self.std, self.chunk = mean, std, chunk
        self._features, self._mask = features, mask
        self._dense = self._normalize(features, mask) if chunk is None else None

    def _normalize(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # a copy, safe to work in place, in the statistics' dtype: float32 (fit_statistics), float64 for a reference
        normalized = features.masked_fill(~mask[..., None, None], 0).to(self.mean.dtype)
        return normalized.sub_(self.mean).div_(self.std)  # in place: one float32 copy, not three

    @property
    def dense(self) -> torch.Tensor | None:
        """The whole normalised (Q, N, 2, D) float32 tensor, or None when this fit streams."""
        return self._dense

    def __getitem__(self, idx: torch.Tensor | slice) -> torch.Tensor:
        if self._dense is not None:
            return self._dense[idx]
        return self._normalize(self._features[idx], self._mask[idx])

    def head(self, verifier: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """``verifier.head`` on every question: (p+, p-), each (Q, N)."""
        if self._dense is not None:
            return verifier.head(self._dense)
        return _over_chunks(lambda span: verifier.head(self[span]), self.shape[0], self.chunk)


def _over_chunks(probabilities, n_questions: int, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``probabilities(slice)`` -> (p+, p-) for each chunk of questions, concatenated: (p+, p-), each (Q, N)."""
    parts = [probabilities(slice(q, q + chunk)) for q in range(0, n_questions, chunk)]
    return torch.cat([p for p, _ in parts]), torch.cat([n for _, n in parts])


#: Float32 bytes (GiB) normalised at once when a fit streams: big enough for full-speed tensor ops, small next to
#: the stored features it saves copying (a 12k-question, 4096-wide task stores 1.9 GiB in bf16).
STREAM_CHUNK_GIB = 0.25


def dense_chunk(features: torch.Tensor, max_dense_gib: float) -> int | None:
    """None when the float32 copy of ``features`` (Q, N, 2, D) fits in ``max_dense_gib``, else the questions per
    streamed chunk (as many as ``min(max_dense_gib, STREAM_CHUNK_GIB)`` holds, at least one)."""
    per_question = 4 * math.prod(features.shape[1:])
    if per_question * features.shape[0] <= max_dense_gib * 2**30:
        return None
    return max(1, int(min(max_dense_gib, STREAM_CHUNK_GIB) * 2**30 // per_question))


def normalized_inputs(features: torch.Tensor, mask: torch.Tensor,
                      config) -> tuple[NormalizedInputs, torch.Tensor, torch.Tensor]:
    """``(normalized (Q, N, 2, D), mean (2, D), std (2, D))``, statistics from the real branches, computed once for
    every step of a fit; streamed per chunk of questions above ``config.max_dense_gib``. ``config`` is the fit's
    ``VerifierConfig`` (any object with its ``normalize``, ``max_dense_gib`` and ``batch_questions`` fields)."""
    chunk = dense_chunk(features, config.max_dense_gib)
    if chunk is not None and config.batch_questions == 0:
        # Full-batch steps would rebuild the whole float32 copy at every step: no memory saved, only time lost.
        log.warning("max_dense_gib=%s: this fit takes full-batch steps (batch_questions=0), so it cannot stream; "
                    "it keeps the whole float32 copy. Set batch_questions to stream.", config.max_dense_gib)
        chunk = None
    mean, std = (t.to(features.device) for t in normalization_stats(features, mask, config.normalize,
                                                                     features.shape[-1], chunk))
    return NormalizedInputs(features, mask, mean, std, chunk), mean, std


def verifier_on(verifier: nn.Module, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``verifier(features)`` on (Q, N, 2, D) -> (p+, p-), each (Q, N): a chunk of questions at a time when the
    float32 copy it makes would exceed the verifier's ``max_dense_gib``, the whole set at once otherwise."""
    chunk = dense_chunk(features, verifier.config.max_dense_gib)
    if chunk is None:
        return verifier(features)
    return _over_chunks(lambda span: verifier(features[span]), features.shape[0], chunk)
