"""Per-token statistics of the model's next-token distribution, for label-free selectors (DeepConf, self-certainty).

`step_stats` turns the logits of the distribution that produced each token, and the token taken, into four numbers.
They are computed where the logits already are: at decode time inside the step (decoding.py, beam.py) and, for banked
branches, from one teacher-forced pass over their tokens (features.stats_from_tokens). Both give the same values (to
float rounding; tests/test_features.py), from the raw logits: a sampled branch's statistics are those of the model's
own distribution, not of the tempered one it was drawn from (a bank record alone could not rebuild the latter).

`encode_stats` / `decode_stats` keep them compactly (bank records, the rescoring sidecars): per token and statistic
one float16, little-endian, base64 per statistic. float16 keeps 11 significant bits (relative error <= 2^-11 ~ 4.9e-4),
far below what tells a confident step from an unsure one.

Dimensions: V vocabulary, any leading dimensions (...).
"""

from __future__ import annotations

import base64
import math

import numpy as np
import torch

STAT_NAMES = ("logprob", "topk_logprob", "entropy", "kl_uniform")
TOP_K = 20


def step_stats(logits: torch.Tensor, chosen: torch.Tensor, k: int = TOP_K,
               probs: torch.Tensor | None = None) -> torch.Tensor:
    """(..., V) logits z and (...) chosen token ids -> (..., 4) float32, in STAT_NAMES order. With l = log_softmax(z)
    = z - logsumexp(z) and p = softmax(z):

        logprob      = l[chosen]                                (log-prob of the token the branch took)
        topk_logprob = mean of the k largest l (k = TOP_K = 20, or V if smaller; DeepConf's token confidence is
                       its negative)
        entropy      = -sum_v p_v l_v                           (0 log 0 = 0: a -inf logit adds nothing)
        kl_uniform   = KL(U || p) = -log V - mean_v l_v = logsumexp(z) - mean(z) - log V   (self-certainty)

    Pure; `probs`, when given, must be softmax(z) already computed (the decoders have it): it saves the softmax, the
    one exp over the vocabulary here. Worked example (tests/test_token_stats.py): z = (0, ln 2, ln 3, ln 6), so
    logsumexp = ln 12, p = (1, 2, 3, 6) / 12, chosen 2, k = 2:
    logprob = ln 3 - ln 12 = -ln 4 = -1.386294; topk_logprob = (ln 1/2 + ln 1/4) / 2 = -1.039721;
    entropy = 1/12 ln 12 + 2/12 ln 6 + 3/12 ln 4 + 6/12 ln 2 = 1.198849;
    kl_uniform = ln 12 - (ln 2 + ln 3 + ln 6) / 4 - ln 4 = 0.202733 (= 1/4 (ln 3 + ln 1.5 + ln 1 + ln 0.5), the
    direct sum of u_v ln(u_v / p_v) with u_v = 1/4).
    """
    z = logits.float()
    vocab = z.shape[-1]
    p = z.softmax(-1) if probs is None else probs
    top, where = z.topk(min(k, vocab), dim=-1)  # on z, not on p: p underflows to 0 for logits ~100 below the top
    # logsumexp(z) = max(z) - log p(argmax): p there is 1 / sum exp(z - max) >= 1 / V, so its log is exact to
    # rounding, and the softmax's pass replaces logsumexp's own (with entropy's form below, ~4x faster than
    # logsumexp + entr: 4 ms, not 18, for 20 rows of a 49k vocabulary on one busy CPU thread).
    lse = top[..., 0] - p.gather(-1, where[..., :1]).squeeze(-1).log()  # (...)
    logprob = z.gather(-1, chosen.long().unsqueeze(-1)).squeeze(-1) - lse
    topk = top.mean(-1) - lse
    entropy = -(p * (z - lse.unsqueeze(-1))).nansum(-1)  # nansum: a -inf logit's 0 x -inf adds nothing (0 log 0)
    kl_uniform = lse - z.mean(-1) - math.log(vocab)
    return torch.stack([logprob, topk, entropy, kl_uniform], dim=-1)


def stats_dict(rows: list[list[float]]) -> dict[str, list[float]]:
    """Per-token rows of 4 values (STAT_NAMES order) -> {name: per-token list}, the form `Branch.stats` takes."""
    columns = list(zip(*rows)) if rows else [()] * len(STAT_NAMES)
    return {name: list(column) for name, column in zip(STAT_NAMES, columns)}


def encode_stats(stats: dict[str, list[float]]) -> dict[str, str]:
    """{name: per-token floats} -> {name: base64 of the little-endian float16 values} (2 bytes a token and
    statistic before base64; values beyond float16's +-65504 become +-inf)."""
    return {name: base64.b64encode(np.asarray(values, dtype="<f2").tobytes()).decode("ascii")
            for name, values in stats.items()}


def decode_stats(encoded: dict[str, str]) -> dict[str, list[float]]:
    """The inverse of `encode_stats`: Python floats holding the float16 values exactly."""
    try:
        return {name: np.frombuffer(base64.b64decode(text, validate=True), dtype="<f2").astype(float).tolist()
                for name, text in encoded.items()}
    except (ValueError, TypeError) as error:
        raise ValueError(f"stored stats {str(encoded)[:80]!r} are not base64 float16 arrays ({error}); the record "
                         "is damaged: rescore it (benchmarks/selectors/rescore_bank.py) or drop its stats.") from None
