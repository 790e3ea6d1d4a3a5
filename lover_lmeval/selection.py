"""`lover_select`: pick one answer per question from N branches, by a named strategy.

Each branch's final answer (and its character span) comes from the task's extractor (answers.py);
branches with equal answers form a group; groups are scored and the best group's answer is returned
as a plain `str` (lm-eval's own regex filter turns non-`str` into "", so this filter must come first).

Strategies (score of a branch -> score of a group):
- greedy: branch 0's answer (CoT-decoding's branch 0 is the plain greedy decode).
- majority: number of branches in the group.
- cot_max / cot_sum: CoT-decoding confidence, Delta = mean over the answer-span tokens of
  p(top1) - p(top2); a branch without an answer has Delta = 0. Group = max / sum of its branches.
- lover_max / lover_sum: verifier score p = (p+ + 1 - p-) / 2; group = max / sum.
- pass_at_n: oracle, reads the gold answer from the doc field `gold`: the gold answer if any branch
  has it. It is an upper bound for every selector, never a selector itself.

Only groups with a valid answer compete; with none, the output is "" (counted wrong). Ties go to the
group holding the lowest branch index, so the greedy answer wins a tie (deterministic).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from lm_eval.api.filter import Filter

from .answers import Answer, get_extractor, span_confidence

STRATEGIES = ("greedy", "majority", "cot_max", "cot_sum", "lover_max", "lover_sum", "pass_at_n")


def group_answers(answers: list[Answer | None]) -> dict[str, list[int]]:
    """Valid answer value -> branch indices, in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i, answer in enumerate(answers):
        if answer is not None:
            groups.setdefault(answer.value, []).append(i)
    return groups


def pick_group(groups: dict[str, list[int]], branch_scores: np.ndarray, reduce: Callable) -> str:
    """Answer of the group with the highest reduced score; ties -> the group with the lowest branch index."""
    if not groups:
        return ""
    best = max(groups.items(), key=lambda item: (reduce(branch_scores[item[1]]), -item[1][0]))
    return best[0]


def select(result, strategy: str, extract: Callable, gold: str | None = None, verifier: str = "lover") -> str:
    """Apply one strategy to one lover_hf result (or a plain string, treated as a single branch)."""
    branches = getattr(result, "branches", None)
    texts = [b.text for b in branches] if branches else [str.__str__(result)]
    answers = [extract(t) for t in texts]
    groups = group_answers(answers)
    if strategy == "greedy":
        return answers[0].value if answers[0] is not None else ""
    if strategy == "majority":
        return pick_group(groups, np.ones(len(texts)), np.sum)
    if strategy == "pass_at_n":
        if gold is None:
            raise ValueError("strategy=pass_at_n needs the doc field named by `gold` (e.g. gold: target).")
        return gold if gold in groups else pick_group(groups, np.ones(len(texts)), np.sum)
    if branches is None:
        raise ValueError(f"strategy={strategy!r} needs lover_hf results (branches with margins and scores); "
                         f"got a plain string. Run with --model lover_hf.")
    reduce = np.max if strategy.endswith("_max") else np.sum
    if strategy.startswith("cot_"):
        scores = np.array([span_confidence(b.margins, b.offsets, a) for b, a in zip(branches, answers)])
    else:
        scores = result.scores(verifier)
    return pick_group(groups, scores, reduce)


class LoverSelect(Filter):
    """lm-eval filter: `- function: lover_select` with `strategy`, `extract`, optional `verifier`, `gold`."""

    def __init__(self, strategy: str = "lover_sum", extract: str = "number", verifier: str = "lover",
                 gold: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if strategy not in STRATEGIES:
            raise ValueError(f"lover_select strategy={strategy!r} is unknown; use one of {', '.join(STRATEGIES)}.")
        self.strategy, self.extract_name, self.verifier, self.gold = strategy, extract, verifier, gold
        self.extract = get_extractor(extract)

    def _gold(self, doc: dict) -> str | None:
        if self.strategy != "pass_at_n":
            return None  # selectors never look at the doc: it holds the label
        if self.gold is None or self.gold not in doc:
            raise ValueError(f"strategy=pass_at_n needs `gold: FIELD` naming the doc's answer field; "
                             f"got gold={self.gold!r}, doc fields: {sorted(doc)}")
        answer = self.extract(str(doc[self.gold]))
        return answer.value if answer is not None else str(doc[self.gold]).strip()

    def check_fit_extractor(self, resps) -> None:
        """The test-time fit must have grouped answers as this filter does, or its scores mean nothing here."""
        if not (self.strategy.startswith("lover_") and self.verifier == "lover"):
            return
        used = {getattr(r, "fit_extract", None) for rs in resps for r in rs} - {None}
        wrong = sorted(used - {self.extract_name})
        if wrong:
            raise ValueError(
                f"lover_hf fitted its test-time verifier with extract={wrong[0]}, but this task's lover_select "
                f"filters extract {self.extract_name}: pass extract={self.extract_name} in --model_args, and run "
                "tasks with different extractors in separate lm_eval calls (`lover compare` sets it per task).")

    def apply(self, resps, docs):
        self.check_fit_extractor(resps)
        return [[select(r, self.strategy, self.extract, self._gold(doc), self.verifier) for r in rs]
                for rs, doc in zip(resps, docs)]
