"""How the next tokens are chosen from a step's distributions: greedy (CoT-decoding after its first step) or nucleus
sampling, each question drawing from its own generator (`question_seed`). Used by decoding.py.

Dimensions: B rows, V vocabulary.
"""

from __future__ import annotations

import hashlib
import json

import torch


def question_seed(seed: int, prompt: list[int]) -> int:
    """The sampling seed of one question: from the run's seed and the prompt, so that questions draw independent
    streams (one shared seed would give every question the same uniforms) and a question's draws do not depend on
    which questions share its batch. sha256, not `hash()`: the same on every machine and Python run."""
    digest = hashlib.sha256(json.dumps([seed, prompt]).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1  # 63 bits: what manual_seed takes


def nucleus(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, V) probabilities -> (B, V) nucleus weights in descending order, and that order."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # always keeps the top token
    return sorted_probs.masked_fill(outside, 0.0), order


def nucleus_sample(probs: torch.Tensor, top_p: float, n: int, generator) -> torch.Tensor:
    """(B, V) probabilities -> (B, n) tokens sampled from the top-p nucleus."""
    weights, order = nucleus(probs, top_p)
    return order.gather(-1, torch.multinomial(weights, n, replacement=True, generator=generator))


def next_tokens(probs: torch.Tensor, rows: list, config, generators: dict) -> torch.Tensor:
    """(B, V) next-token probabilities -> (B,) the token each row continues with, on the device. `rows[i].q` is row
    i's question (a question's rows contiguous); `config` a DecodingConfig; `generators` per question (sampling)."""
    if config.mode == "cot":
        return probs.argmax(-1)
    # One sort for every row; only the draws are per question, each from its own generator.
    weights, order = nucleus((probs.log() / config.temperature).softmax(-1), config.top_p)
    tokens, start = [], 0
    while start < len(rows):  # a question's rows are contiguous, in branch order
        end = next((i for i in range(start, len(rows)) if rows[i].q != rows[start].q), len(rows))
        picks = torch.multinomial(weights[start:end], 1, replacement=True,
                                  generator=generators[rows[start].q])  # (rows of q, 1)
        tokens.append(order[start:end].gather(-1, picks)[:, 0])
        start = end
    return torch.cat(tokens)
