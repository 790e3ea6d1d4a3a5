"""One decoded solution (`Branch`) and how a branch's tokens become one: why it ended, where its text is cut.

Shared by the decoders (decoding.py: CoT-decoding and sampling; beam.py: beam search) and by everything that reads
branches back (bank, results, features). Dimensions: V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Branch:
    """One decoded solution."""

    text: str
    """Generated text, cut at the first stop string (as lm-eval's HFLM does)."""
    token_ids: list[int]
    """Generated tokens kept in `text` (no EOS, nothing after a stop string)."""
    margins: list[float]
    """p(top1) - p(top2) of the model's next-token distribution at each kept token."""
    offsets: list[tuple[int, int]]
    """Character span [start, end) of each kept token in `text` (clipped to the text)."""
    finish_reason: str
    """`stop` (a stop string), `eos`, or `length` (token budget spent)."""
    stats: dict[str, list[float]] | None = None
    """Per kept token (aligned with `token_ids` and `margins`: entry j is from the distribution that produced token
    j), one list per name in token_stats.STAT_NAMES. None for branches decoded before the statistics existed and not
    rescored (features.stats_from_tokens rebuilds them from the tokens)."""


def top1_top2_margin(probs: torch.Tensor) -> torch.Tensor:
    """(..., V) probabilities -> (...,) p(top1) - p(top2)."""
    top2 = probs.topk(2, dim=-1).values
    return top2[..., 0] - top2[..., 1]


def finish_reason_of(tokenizer, ids: list[int], stop: list[str], eos_ids: set[int], budget: int) -> str | None:
    """Why the branch is done, or None. Called every step, so it only decodes a short tail window:
    a stop string that appears now must end in the newest token (it was absent one step ago)."""
    if ids[-1] in eos_ids:
        return "eos"
    window = max((len(s) for s in stop), default=0) + 8
    tail = tokenizer.decode(ids[-window:], skip_special_tokens=True)
    if any(s and s in tail for s in stop):
        return "stop"
    return "length" if len(ids) >= budget else None


def make_branch(tokenizer, ids: list[int], margins: list[float], stop: list[str], reason: str,
                stats: dict[str, list[float]] | None = None) -> Branch:
    """Cut the text at the first stop string and keep the tokens (with offsets, margins and `stats`, one entry a
    generated token like `margins`) that lie in it."""
    body = ids[:-1] if reason == "eos" else ids
    text = tokenizer.decode(body, skip_special_tokens=True)
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))
    text = text[:cut]
    # Offsets from decoding growing prefixes: robust to multi-token characters and merges.
    ends = [len(tokenizer.decode(body[: k + 1], skip_special_tokens=True)) for k in range(len(body))]
    starts = [0] + ends[:-1]
    kept = sum(1 for s in starts if s < len(text))
    offsets = [(min(s, len(text)), min(e, len(text))) for s, e in zip(starts[:kept], ends[:kept])]
    kept_stats = None if stats is None else {name: values[:kept] for name, values in stats.items()}
    return Branch(text, body[:kept], margins[:kept], offsets, reason, kept_stats)
