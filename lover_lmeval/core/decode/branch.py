"""One decoded solution (`Branch`) and how a branch's tokens become one: why it ended, where its text is cut.

Shared by the decoders (decoding.py: CoT-decoding and sampling; beam.py: beam search) and by everything that reads
branches back (bank, results, features). Dimensions: V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tokenizers.decoders import ByteLevel


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


def token_ends(tokenizer, ids: list[int]) -> list[int]:
    """Where each token's text ends: `len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True))` for every k.

    That definition is robust to characters spread over tokens (U+FFFD until whole), merges and skipped special tokens,
    but decoding every prefix costs O(n^2) (3.5 s for 4,096 SmolLM2 tokens). No decoder-blind shortcut can equal it:
    each prefix's text is itself O(n) long. A byte-level BPE decoder (GPT-2's: SmolLM2, Qwen2.5) that cleans up no
    spaces turns each token into bytes of its own and the bytes of the tokens not skipped into their lossy UTF-8
    decoding; once a prefix's text ends in a whole character (not U+FFFD) no byte is pending, so decode(ids[:t]) =
    decode(ids[:a]) + decode(ids[a:t]) for every t > a. Each token then costs one decode of the tokens since the last
    such anchor a, one or a few: O(n), 2-4 ms of CPU per 1,000 tokens up to 32k (benchmarks/performance/bench_cut.py;
    only a run of tokens each leaving the text on U+FFFD widens the window, at worst to what the definition pays). Any
    other tokenizer, or joined pieces that are not the tokenizer's own full decode, takes the definition."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if (backend is not None and isinstance(backend.decoder, ByteLevel)
            and not getattr(tokenizer, "clean_up_tokenization_spaces", True)):
        ends, pieces, anchor, settled = [], [], 0, 0
        for k in range(len(ids)):
            tail = backend.decode(ids[anchor: k + 1], skip_special_tokens=True)
            ends.append(settled + len(tail))
            if not tail.endswith("\ufffd"):  # a whole character last: nothing pending, the next anchor
                pieces.append(tail)
                anchor, settled = k + 1, ends[-1]
        if anchor < len(ids):
            pieces.append(tail)
        if "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=True):
            return ends
    return [len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True)) for k in range(len(ids))]


def make_branch(tokenizer, ids: list[int], margins: list[float], stop: list[str], reason: str,
                stats: dict[str, list[float]] | None = None) -> Branch:
    """Cut the text at the first stop string and keep the tokens (with offsets, margins and `stats`, one entry a
    generated token like `margins`) that lie in it. Linear in the branch's length (`token_ends`)."""
    body = ids[:-1] if reason == "eos" else ids
    text = tokenizer.decode(body, skip_special_tokens=True)
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))
    text = text[:cut]
    ends = token_ends(tokenizer, body)
    starts = [0] + ends[:-1]
    kept = sum(1 for s in starts if s < len(text))
    offsets = [(min(s, len(text)), min(e, len(text))) for s, e in zip(starts[:kept], ends[:kept])]
    kept_stats = None if stats is None else {name: values[:kept] for name, values in stats.items()}
    return Branch(text, body[:kept], margins[:kept], offsets, reason, kept_stats)
