"""Selection: pick one answer per question from its N branches, by a named strategy.

Each branch's final answer (and its character span) comes from an extractor (answers.py); branches with
equal answers form a group (`answers.answer_groups`), equal once `answers.stated_answers` gave each answer its group's
representative (by the extractor's equivalence: math-verify's for `math`); each candidate group gets a score and the
best group's answer is returned. Strategies (score of a branch -> score of a group):

- greedy: branch 0's answer (CoT-decoding's branch 0 is the plain greedy decode), read as lm-eval's greedy is.
- majority: number of branches in the group.
- cot_max / cot_sum: CoT-decoding confidence, Delta = mean over the answer-span tokens of
  p(top1) - p(top2); a branch without an answer has Delta = 0. Group = max / sum of its branches.
- lover_max / lover_sum: verifier score p = (p+ + 1 - p-) / 2; group = max / sum.
- ccs_max / ccs_sum, pca_max / pca_sum: the same from the plain probes fitted beside LoVer (CCS; the contrast pairs'
  first principal direction); ptrue_max: P(True), the model's own probability that the branch's answer is true
  (`SCORES_READ`).
- rpc (rpc.py), inv_entropy_full, softsc_min (selectors.py): from per-token statistics.
- self_certainty(_borda), deepconf10_w32 / deepconf90_w32, cisc_t0.1, loglik_max / loglik_vote, short3: label-free
  selectors from per-token statistics (`Branch.stats`) or token counts, in selectors.py.
- pass_at_n: an *oracle*, not a selector: it reads the gold answer and returns the answer of a branch that has it
  (`answers.matches_gold`), if any. It is an upper bound for every selector.

Every strategy but greedy reads each branch's *stated* answer (`answers.stated_answer`): a branch cut at the token
budget whose answer is only the extractor's fallback (no "The answer is ...") has none.

Only groups with an answer compete; with none, the output is "" (counted wrong). Group scores within
`TIE_TOLERANCE` (1e-3) of the best tie, and a tie goes to the larger group, then to the group holding the lowest
branch index (the greedy answer): the same pick in `lm_eval`, `lover compare` and the core pipeline, whatever float
noise separates their scores. A strategy is one decorated function (`@register_strategy`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .answers import Answer, Extractor, answer_members, get_extractor, matches_gold, span_confidence, stated_answers


@dataclass
class SelectionConfig:
    """Which answers compete and whose scores choose among them."""

    extract: str = "number"
    """Answer extractor (answers.EXTRACTORS) grouping the branches for the test-time fit; it must be the extractor
    of the task's `lover_select` filters, which refuse scores fitted with another one."""
    verifier: str | None = "fit"
    """`fit`: fit a verifier label-free on the evaluated questions' own branches (test-time fit); a checkpoint
    path: score with that verifier; None: no verifier scores (the lover_* strategies then cannot run)."""
    supervised_verifier: str | None = None
    """A checkpoint scored next to the first as `supervised` (select it with `verifier: supervised`)."""

    def __post_init__(self) -> None:
        get_extractor(self.extract)  # names the allowed extractors
        for arg, path in (("verifier", self.verifier), ("supervised_verifier", self.supervised_verifier)):
            if path not in (None, "fit") and not Path(path).expanduser().is_file():
                raise ValueError(f"{arg}={path} does not exist (or is not a file); pass a checkpoint written by "
                                 "`lover train`" + (", verifier=fit (test-time fit) or verifier=None" if arg == "verifier"
                                                    else "") + ".")

    @property
    def fit_at_test_time(self) -> bool:
        return self.verifier == "fit"

    def checkpoints(self) -> dict[str, str]:
        """Verifier name -> checkpoint path, for the verifiers loaded from files."""
        return {name: path for name, path in (("lover", self.verifier), ("supervised", self.supervised_verifier))
                if path is not None and path != "fit"}


@dataclass
class Question:
    """What a strategy sees of one question."""

    result: object
    """A `LoverResult` (branches, margins, verifier scores), or a plain string treated as one branch."""
    answers: list[Answer | None]
    """Each branch's extracted answer (None: no answer)."""
    verifier: str
    """Whose scores the lover_* strategies read (`LoverResult.verifier_probs` key)."""
    gold: str | None
    """The gold answer: given to oracle strategies only."""
    first: Answer | None = None
    """Branch 0's answer as the extractor reads it, fallback included even when the branch was cut (what lm-eval's own
    greedy run scores); None: `answers[0]`."""
    extract: Extractor | None = None
    """The extractor the answers came from: its equivalence says which answer is the gold one (oracles only)."""

    @property
    def members(self) -> dict[str, list[int]]:
        return answer_members([a.value if a is not None else None for a in self.answers])

    @property
    def branches(self):
        return getattr(self.result, "branches", None)


Strategy = Callable[[Question], str]
#: name -> strategy; `lover_select`'s `strategy:` names one of these.
STRATEGIES: dict[str, Strategy] = {}
#: strategies that read the gold answer (never a selection method; reported as upper bounds)
ORACLES: set[str] = set()


def register_strategy(name: str, oracle: bool = False) -> Callable[[Strategy], Strategy]:
    """Decorator: make a strategy available as ``strategy: name``; ``oracle=True`` lets it read the gold answer."""

    def add(strategy: Strategy) -> Strategy:
        if name in STRATEGIES:
            raise ValueError(f"selection strategy {name!r} is registered twice")
        STRATEGIES[name] = strategy
        if oracle:
            ORACLES.add(name)
        return strategy

    return add


#: Group scores closer than this to the best are a tie. Far above the float noise between code paths (features from a
#: KV cache vs recomputed from tokens, another batch size or rank: scores agree to ~5e-5 there), far below any
#: difference a verifier means; without it a verifier whose scores sit at 0.5 picks by rounding noise.
TIE_TOLERANCE = 1e-3


def pick_group(members: dict[str, list[int]], branch_scores: np.ndarray, reduce: Callable) -> str:
    """Answer of the group with the highest reduced score. Groups within `TIE_TOLERANCE` of the best tie; a tie goes
    to the larger group, then to the group holding the lowest branch index (with CoT-decoding, the greedy answer)."""
    if not members:
        return ""
    return pick_scored(members, {answer: reduce(branch_scores[branches]) for answer, branches in members.items()})


def pick_scored(members: dict[str, list[int]], scores: dict[str, float]) -> str:
    """`pick_group`'s rule on scores already given per group (`scores[answer]`): the best, ties as there."""
    if not members:
        return ""
    # A NaN score (a diverged verifier) ranks below every real one instead of breaking the comparison.
    scores = {answer: float(np.nan_to_num(scores[answer], nan=-np.inf)) for answer in members}
    best = max(scores.values())
    tied = [answer for answer in members if scores[answer] >= best - TIE_TOLERANCE]
    return min(tied, key=lambda answer: (-len(members[answer]), members[answer][0]))


@register_strategy("greedy")
def greedy(question: Question) -> str:
    first = question.first or question.answers[0]
    return first.value if first is not None else ""


@register_strategy("majority")
def majority(question: Question) -> str:
    return pick_group(question.members, np.ones(len(question.answers)), np.sum)


def _needs_branches(question: Question, strategy: str):
    if question.branches is None:
        raise ValueError(f"strategy={strategy!r} needs lover_hf results (branches with margins and scores); "
                         f"got a plain string. Run with --model lover_hf.")
    return question.branches


def _cot_scores(question: Question, strategy: str) -> np.ndarray:
    branches = _needs_branches(question, strategy)
    return np.array([span_confidence(b.margins, b.offsets, a) for b, a in zip(branches, question.answers)])


def _verifier_scores(question: Question, strategy: str) -> np.ndarray:
    _needs_branches(question, strategy)
    return question.result.scores(question.verifier)


def _group_strategy(name: str, branch_scores: Callable, reduce: Callable) -> None:
    register_strategy(name)(lambda question: pick_group(question.members, branch_scores(question, name), reduce))


for _prefix, _scores in (("cot", _cot_scores), ("lover", _verifier_scores)):
    for _reduce_name, _reduce in (("max", np.max), ("sum", np.sum)):
        _group_strategy(f"{_prefix}_{_reduce_name}", _scores, _reduce)

#: Strategies that read the scores of one named scorer, whatever `Question.verifier` says: the plain probes that the
#: test-time fit fits beside LoVer on the same features (CCS, the contrast pairs' first principal direction:
#: verify/probes.py) and P(True), one more teacher-forced pass per branch (decode/ptrue.py; opt-in).
SCORES_READ = {"ccs_max": "ccs", "ccs_sum": "ccs", "pca_max": "pca", "pca_sum": "pca", "ptrue_max": "ptrue"}


def _named_scores(name: str) -> Callable[[Question, str], np.ndarray]:
    def scores(question: Question, strategy: str) -> np.ndarray:
        _needs_branches(question, strategy)
        return question.result.scores(name)

    return scores


for _strategy, _name in SCORES_READ.items():
    _group_strategy(_strategy, _named_scores(_name), np.max if _strategy.endswith("_max") else np.sum)


@register_strategy("pass_at_n", oracle=True)
def pass_at_n(question: Question) -> str:
    if question.gold is None:
        raise ValueError("strategy=pass_at_n needs the doc field named by `gold` (e.g. gold: target).")
    right = [answer for answer in question.members if matches_gold(question.extract, answer, question.gold)]
    return right[0] if right else majority(question)


def check_strategy(strategy: str) -> None:
    """ValueError naming the registered strategies when `strategy` is not one of them."""
    if strategy not in STRATEGIES:
        raise ValueError(f"lover_select strategy={strategy!r} is unknown; use one of {', '.join(STRATEGIES)}.")


def question_of(result, extract: Callable, gold: str | None = None, verifier: str = "lover") -> Question:
    """What a strategy sees of one lover_hf result (or a plain string, treated as a single branch)."""
    branches = getattr(result, "branches", None)
    if not branches:
        return Question(result, [extract(str.__str__(result))], verifier, gold, extract=extract)
    answers = stated_answers(extract, branches)
    # branch 0's stated answer, in its group's representative; read again only where the cut-branch rule dropped it
    first = answers[0] if answers[0] is not None else extract(branches[0].text)
    return Question(result, answers, verifier, gold, first=first, extract=extract)


def select(result, strategy: str, extract: Callable, gold: str | None = None, verifier: str = "lover") -> str:
    """Apply one strategy to one lover_hf result (or a plain string, treated as a single branch)."""
    check_strategy(strategy)
    return STRATEGIES[strategy](question_of(result, extract, gold, verifier))


def pick_branch(result, strategy: str, extract: Callable, verifier: str = "lover") -> int:
    """The branch whose whole text a row on a stock lm-eval task hands to the task's own chain: for greedy branch 0
    (what lm-eval's own row reads), else the first branch of the answer group `select` picks (its branches state one
    answer as `extract` reads it, so the chain scores each alike); branch 0 when no branch states an answer."""
    if strategy == "greedy" or not getattr(result, "branches", None):
        return 0
    check_strategy(strategy)
    question = question_of(result, extract, None, verifier)  # the branches' answers read once, for both steps
    value = STRATEGIES[strategy](question)
    members = answer_members([a.value if a is not None else None for a in question.answers])
    return members[value][0] if value in members else 0
