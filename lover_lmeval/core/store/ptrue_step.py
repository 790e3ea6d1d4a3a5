"""The opt-in P(True) pass (`ptrue=true`) as a step of the pipeline, beside the store step's shared pass
(complete.py): its query and its true and false words tokenized once a run, each question's branches read by
decode/ptrue.py's pass, and what the pass scored and cost kept for the provenance.

Dimensions: N branches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..decode.branch import Branch
from ..decode.ptrue import FALSE_WORDS, TRUE_WORDS, PTrueConfig, ptrue_from_tokens, word_tokens
from ...log import log, model_name


@dataclass
class PTrueRecord:
    """What the pass scored and cost in a run (the provenance's `ptrue`)."""

    questions: int = 0
    seconds: float = 0.0

    def as_dict(self, query: str) -> dict:
        return {"questions": self.questions, "seconds": self.seconds,
                "seconds_per_question": self.seconds / max(self.questions, 1), "query": query}


class PTrueStep:
    """P(True) for each branch of a question, with `tokenizer`'s ids of `config`'s query and words."""

    def __init__(self, tokenizer, config: PTrueConfig):
        self.query = config.query
        self.query_ids = tokenizer.encode(config.query, add_special_tokens=False)
        self.true_ids, self.false_ids = word_tokens(tokenizer, TRUE_WORDS), word_tokens(tokenizer, FALSE_WORDS)
        self.record = PTrueRecord()

    @property
    def label(self) -> str:
        """What scored the branches, for the result's `scored_by`."""
        return f"P(True) pass, query {self.query!r}"

    def score(self, model, prompt: list[int], branches: list[Branch]) -> np.ndarray:
        """(N, 2) = (P(True), 1 - P(True)) per branch, as a verifier's (p+, p-), so that its score (p+ + 1 - p-) / 2
        is P(True); the pass's time is logged and kept."""
        began = time.perf_counter()
        p = ptrue_from_tokens(model, prompt, branches, self.query_ids, self.true_ids, self.false_ids)  # (N,)
        seconds = time.perf_counter() - began
        self.record.questions += 1
        self.record.seconds += seconds
        log.info("%s: P(True) pass over %d branches: %.2f s", model_name(), len(branches), seconds)
        return np.stack([p, 1 - p], axis=-1)  # (N, 2)
