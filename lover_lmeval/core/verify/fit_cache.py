"""Fits kept by the digest of everything they read, so a process refits nothing it has fitted already.

Why: `lover compare` refits the test-time verifier for each point of its accuracy-vs-N curve and each layer of its
sweep; the curve's last point (every branch) and the sweep's own layer are the test-time fit's inputs exactly, and a
`regime=authors` fit costs minutes on a CPU. A fit is a deterministic function of its inputs (features, mask,
groups, labels, answer ids, config; its seeds are in the config, it never reads the global RNG) on one device, so a
kept fit is what a refit would give. Only identical inputs hit: the key hashes every tensor's bytes, dtype and shape,
the whole config and the device the fit runs on.

Dimensions: Q questions, N branches, D hidden size.
"""

from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict
from dataclasses import asdict

import torch

from .verifier import FitResult, VerifierConfig, fit


def _digest(*tensors: torch.Tensor | None) -> str:
    """sha256 over each tensor's dtype, shape and bytes (None counts as a marker): ~1 s per GB on one core."""
    h = hashlib.sha256()
    for tensor in tensors:
        if tensor is None:
            h.update(b"none;")
            continue
        h.update(f"{tensor.dtype};{tuple(tensor.shape)};".encode())
        # bytes through uint8 (numpy has no bfloat16), on the CPU
        h.update(tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class FitCache:
    """The last `size` fits by input digest; a hit returns a deep copy (callers orient and move their verifier)."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._fits: OrderedDict[str, FitResult] = OrderedDict()
        self.hits = 0
        """Fits served from the cache, for logs and tests."""

    def fit(self, features: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor, config: VerifierConfig,
            labels: torch.Tensor | None = None, answer_ids: torch.Tensor | None = None) -> FitResult:
        """`verifier.fit` with these arguments, computed once per distinct input."""
        key = _digest(features, mask, groups, labels, answer_ids) + repr(sorted(asdict(config).items())) + str(
            features.device)
        if key in self._fits:
            self.hits += 1
            self._fits.move_to_end(key)
            return copy.deepcopy(self._fits[key])
        result = fit(features, mask, groups, config, labels=labels, answer_ids=answer_ids)
        self._fits[key] = copy.deepcopy(result)
        while len(self._fits) > self.size:
            self._fits.popitem(last=False)
        return result


#: The process's cache: lover_hf's test-time fit fills it, `lover compare`'s refits on the same inputs read it.
FITS = FitCache()
