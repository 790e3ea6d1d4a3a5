"""P(True) (Kadavath et al. 2022, "Language Models (Mostly) Know What They Know"): the model's own probability that a
branch's answer is true, from one more teacher-forced pass per branch. Opt-in (`ptrue=true`), as it costs a pass
over every branch's tokens.

Kadavath et al. show the model the question and a proposed answer, then ask "Is the proposed answer: (A) True (B)
False" and read the probability of True. Here the question is the prompt and the proposed answer is the branch
itself, so the pass runs prompt + branch + `PTRUE_QUERY` and reads the next-token distribution p:

    P(True) = sum_{t in TRUE_WORDS} p(t) / (sum_{t in TRUE_WORDS} p(t) + sum_{f in FALSE_WORDS} p(f))

over each word's first token (" true" and " True"; " false" and " False"). The query continues the branch's own text
(no new chat turn is opened); both it and the words were fixed before any result (issue Selectors II).

Dimensions: N branches, B rows of one pass, U tokens of a row, D hidden size, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .branch import Branch
from .features import _head, length_buckets
from .kv import cache_of, extend_with_tokens, input_device, snapshot

PTRUE_QUERY = "\n\nIs the proposed answer above true or false? The proposed answer is"
TRUE_WORDS, FALSE_WORDS = (" true", " True"), (" false", " False")


@dataclass
class PTrueConfig:
    """Whether to score P(True), and the query that asks for it."""

    enabled: bool = False
    """model_arg `ptrue=true`: one more teacher-forced pass per branch (the ptrue_max row reads it)."""
    query: str = PTRUE_QUERY
    """Appended to prompt + branch; the next token is read."""

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"ptrue must be true or false, got {self.enabled!r}")
        if not str(self.query).strip():
            raise ValueError(f"the P(True) query {self.query!r} is empty: the pass would read the branch's own next "
                             f"token, not a verdict; keep the default {PTRUE_QUERY!r}.")


def word_tokens(tokenizer, words: tuple[str, ...]) -> list[int]:
    """The distinct first tokens of `words`, each encoded on its own without special tokens."""
    return sorted({tokenizer.encode(word, add_special_tokens=False)[0] for word in words})


def ptrue_of_probs(probs: torch.Tensor, true_ids: list[int], false_ids: list[int]) -> torch.Tensor:
    """(..., V) next-token probabilities -> (...) P(True) = p(true words) / (p(true words) + p(false words)); 0.5 when
    both are 0 (no preference to read)."""
    true, false = probs[..., true_ids].sum(-1), probs[..., false_ids].sum(-1)
    total = true + false
    return torch.where(total > 0, true / total.clamp(min=torch.finfo(total.dtype).tiny), torch.full_like(total, 0.5))


@torch.inference_mode()
def ptrue_from_tokens(model, prompt_ids: list[int], branches: list[Branch], query_ids: list[int],
                      true_ids: list[int], false_ids: list[int]) -> np.ndarray:
    """(N,) P(True) of each branch: one prefill of the prompt, then prompt + branch + query per branch on top of it
    (branches of similar length share a pass, `features.length_buckets`), the LM head on each row's last position."""
    prefill = model(input_ids=torch.tensor([prompt_ids], device=input_device(model)), use_cache=True,
                    logits_to_keep=1)
    base = snapshot(cache_of(prefill), 0, len(prompt_ids))
    rows = [b.token_ids + query_ids for b in branches]
    out_p = np.zeros(len(branches))
    for run in length_buckets([len(r) for r in rows]):
        out, last = extend_with_tokens(model, [base] * len(run), [rows[i] for i in run], final_hidden=True)
        final = out.final_hidden[torch.arange(len(run), device=last.device), last]  # (B, D)
        probs = _head(model, final).float().softmax(-1)  # (B, V)
        out_p[run] = ptrue_of_probs(probs, true_ids, false_ids).cpu().double().numpy()
        del out
    return out_p
