"""The sampling references (core/select/references.py): avg@N, pass@k by the unbiased estimator and maj@k as the
expectation over k-subsets, against hand-worked values and a slow reference that enumerates every k-subset; kept
apart from the selectors."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.select.answers import extract_number
from lover_lmeval.core.select.references import k_values, majority_wins, pass_at_k, reference_rows
from lover_lmeval.core.select.rows import ROWS
from lover_lmeval.core.select.selection import STRATEGIES, Question


def _answers(values):
    from lover_lmeval.core.select.answers import Answer

    return [None if v is None else Answer(v, 0, len(v)) for v in values]


def enumerated(values: list[str | None], gold: str, k: int) -> tuple[float, float]:
    """(pass@k, maj@k) the slow way: every k-subset of the branches (kept in branch order), right when one of its
    branches states the gold answer / when the majority strategy itself, run on the subset, picks it."""
    subsets = list(itertools.combinations(range(len(values)), k))
    passes = sum(any(values[i] == gold for i in subset) for subset in subsets)
    majority = STRATEGIES["majority"]
    wins = sum(majority(Question(None, _answers([values[i] for i in subset]), "lover", None)) == gold
               for subset in subsets)
    return passes / len(subsets), wins / len(subsets)


def _rows(values, gold):
    """reference_rows on one question whose branches state `values` ("The answer is v.", or nothing)."""
    class Result:
        branches = [Branch("no idea" if v is None else f"The answer is {v}.", [], [], [], "eos") for v in values]

    return {name: float(row[0]) for name, row in reference_rows([Result()], [gold], extract_number).items()}


def test_hand_worked_question():
    """Branches 7, 8, 7, (none), gold 7: n = 4, c = 2.
    avg@4 = 2/4 = 0.5. pass@1 = 1 - C(2,1)/C(4,1) = 0.5; pass@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6 = 5/6; pass@4 = 1.
    maj@2 over the 6 pairs: {0,1} 7 vs 8 tie, branch 0's 7 wins; {0,2} 7; {0,3} 7; {1,2} 8 vs 7 tie, branch 1's 8
    wins (wrong); {1,3} 8 (wrong); {2,3} 7: 4/6 = 2/3. maj@1 = 0.5; maj@4: 7 has two votes, 8 one: 1."""
    rows = _rows(["7", "8", "7", None], "7")
    assert list(rows) == ["avg@4", "pass@1", "pass@2", "pass@4", "maj@1", "maj@2", "maj@4"]
    expected = {"avg@4": 0.5, "pass@1": 0.5, "pass@2": 5 / 6, "pass@4": 1.0, "maj@1": 0.5, "maj@2": 2 / 3,
                "maj@4": 1.0}
    assert rows == pytest.approx(expected, abs=1e-12)


def test_ties_go_to_the_lowest_branch_index_as_majority_breaks_them():
    """Branches 8, 7, 8, 7, gold 7: each 2 of 4. maj@2 over the 6 pairs: {0,1} tie -> branch 0's 8; {0,2} 8; {0,3}
    tie -> 8; {1,2} tie -> branch 1's 7; {1,3} 7; {2,3} tie -> branch 2's 8: 2/6 = 1/3. maj@4: 2-2, branch 0's 8
    wins: 0, as majority picks on all four. pass@2 = 1 - C(2,2)/C(4,2) = 5/6; maj@1 = pass@1 = avg@4 = 0.5."""
    rows = _rows(["8", "7", "8", "7"], "7")
    assert rows == pytest.approx({"avg@4": 0.5, "pass@1": 0.5, "pass@2": 5 / 6, "pass@4": 1.0, "maj@1": 0.5,
                                  "maj@2": 1 / 3, "maj@4": 0.0}, abs=1e-12)


def test_no_right_branch_scores_zero_everywhere():
    assert set(_rows(["1", "2", None], "3").values()) == {0.0}
    assert _rows([None, None], "3") == {"avg@2": 0.0, "pass@1": 0.0, "pass@2": 0.0, "maj@1": 0.0, "maj@2": 0.0}


def test_estimators_equal_every_k_subset_enumerated():
    """200 random questions, 1-9 branches over answers {1, 2, 3} and none, gold 1: pass@k and maj@k for every k equal
    the enumeration of every k-subset (`enumerated`), to float rounding."""
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 9)
        values = [rng.choice(["1", "1", "2", "3", None]) for _ in range(n)]
        members: dict[str, list[int]] = {}
        for i, v in enumerate(values):
            if v is not None:
                members.setdefault(v, []).append(i)
        c = values.count("1")
        for k in range(1, n + 1):
            slow_pass, slow_maj = enumerated(values, "1", k)
            assert pass_at_k(n, c, k) == pytest.approx(slow_pass, abs=1e-12), (values, k)
            right = [answer == "1" for answer in members]
            assert majority_wins(list(members.values()), right, n, k) == pytest.approx(slow_maj, abs=1e-12), (values, k)


def test_maj_at_n_is_majority_and_pass_at_n_any_branch_right():
    """On 50 random questions of 6 branches, maj@6 is majority voting's 0/1 and pass@6 the pass_at_n oracle's."""
    from lover_lmeval.core.select.selection import select

    rng = random.Random(1)
    for _ in range(50):
        values = [rng.choice(["1", "2", "3", None]) for _ in range(6)]
        rows = _rows(values, "1")

        class Result:
            branches = [Branch("no idea" if v is None else f"The answer is {v}.", [], [], [], "eos") for v in values]

        assert rows["maj@6"] == float(select(Result(), "majority", extract_number) == "1")
        assert rows["pass@6"] == float(select(Result(), "pass_at_n", extract_number, gold="1") == "1")


def test_k_values():
    assert k_values(1) == [1] and k_values(2) == [1, 2] and k_values(10) == [1, 2, 4, 8, 10]
    assert k_values(64) == [1, 2, 4, 8, 16, 32, 64]


def test_math_answers_are_counted_by_their_groups():
    """Branches \\frac{1}{2}, 0.5, 1/3 and gold \\dfrac12: the first two are one right group, c = 2 of n = 3;
    avg@3 = 2/3, pass@2 = 1 - C(1,2)/C(3,2) = 1, maj@2: {0,1} right, {0,2} tie -> branch 0's, right, {1,2} tie ->
    branch 1's, right: 1."""
    from lover_lmeval.core.select.math_answers import extract_math

    class Result:
        branches = [Branch(f"\\boxed{{{v}}}", [], [], [], "eos") for v in (r"\frac{1}{2}", "0.5", "1/3")]

    rows = {name: float(row[0]) for name, row in reference_rows([Result()], [r"\dfrac12"], extract_math).items()}
    assert rows == pytest.approx({"avg@3": 2 / 3, "pass@1": 2 / 3, "pass@2": 1.0, "pass@3": 1.0, "maj@1": 2 / 3,
                                  "maj@2": 1.0, "maj@3": 1.0}, abs=1e-12)


def test_references_are_no_strategy_and_no_row():
    """They read the gold answer: no selector, no task filter, no row of the selector table (core/select/rows.py)."""
    names = set(_rows(["1", "2"], "1"))
    assert not names & set(STRATEGIES) and not names & set(ROWS)
    assert all(np.isfinite(v) for v in _rows(["1", "2"], "1").values())


def test_the_leaderboard_shows_them_in_a_table_of_their_own():
    """`lover compare`'s markdown: the strategy table lists the selectors' rows only; the references follow in their
    own table, in the report's order, with their intervals."""
    from lover_lmeval.apps.leaderboard import render_markdown

    cell = {"acc": 0.5, "low": 0.25, "high": 0.75, "n": 4}
    report = {"one_answer_rule": {"share": 0.95, "min_questions": 20},
              "tasks": {"t": {"rows": {"majority": cell}, "distinct_answers": 2.0, "paired": {},
                              "references": {"avg@4": cell, "pass@1": cell, "maj@4": {**cell, "acc": 1.0}}}}}
    strategies, references = render_markdown(report).split("References:")
    assert "| majority | 0.500 [0.250, 0.750] n=4 |" in strategies and "@" not in strategies
    assert [line.split(" | ")[0] for line in references.splitlines() if line.startswith("| ")] == [
        "| reference", "| avg@4", "| pass@1", "| maj@4"]
    assert "| maj@4 | 1.000 [0.250, 0.750] n=4 |" in references
