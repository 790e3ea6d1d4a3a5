"""`lover_select` on hand-made results: every strategy, ties, invalid answers, span -> token mapping."""

from __future__ import annotations

import numpy as np
import pytest

from lover_lmeval.core.select.answers import Answer, extract_number, span_confidence
from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.results import LoverResult
from lover_lmeval.harness.filter import LoverSelect


def _branch(text: str, margin: float) -> Branch:
    """One token per character, each with the same margin (enough to test the span mapping)."""
    return Branch(text, list(range(len(text))), [margin] * len(text), [(i, i + 1) for i in range(len(text))], "eos")


def _result(texts_margins, scores=None):
    branches = [_branch(t, m) for t, m in texts_margins]
    probs = None
    if scores is not None:  # p+ = s, p- = 1 - s  =>  p = (s + 1 - (1 - s)) / 2 = s
        probs = {"lover": np.array([[s, 1 - s] for s in scores])}
    return LoverResult(branches, np.zeros((len(branches), 2, 3), np.float32), probs)


# Branch answers: 7, 8, 8, (none), 9. Majority = 8 (two votes).
TEXTS = [("The answer is 7.", 0.9), ("The answer is 8.", 0.2), ("so 8", 0.3), ("no idea", 1.0), ("it is 9", 0.5)]


@pytest.mark.parametrize("strategy, scores, expected", [
    ("greedy", None, "7"),
    ("majority", None, "8"),
    # cot_max: best single branch Delta: 7 has 0.9 (the invalid branch's 1.0 counts as 0)
    ("cot_max", None, "7"),
    # cot_sum: 7 -> 0.9, 8 -> 0.2 + 0.3 = 0.5, 9 -> 0.5: 7 wins
    ("cot_sum", None, "7"),
    # lover_max: best branch score 0.8 is on 9
    ("lover_max", [0.1, 0.5, 0.6, 0.99, 0.8], "9"),
    # lover_sum: 7 -> 0.1, 8 -> 1.1, 9 -> 0.8; the invalid branch never competes
    ("lover_sum", [0.1, 0.5, 0.6, 0.99, 0.8], "8"),
])
def test_each_strategy_picks_the_hand_worked_group(strategy, scores, expected):
    (out,) = LoverSelect(strategy=strategy, extract="number").apply([[_result(TEXTS, scores)]], [{}])
    assert out == [expected] and type(out[0]) is str


def test_exact_ties_between_equal_groups_go_to_the_lowest_branch_index():
    tied = [("it is 5", 0.5), ("it is 6", 0.5), ("it is 6", 0.5), ("it is 5", 0.5)]
    for strategy in ("majority", "cot_sum", "cot_max"):
        (out,) = LoverSelect(strategy=strategy, extract="number").apply([[_result(tied)]], [{}])
        assert out == ["5"], strategy
    (out,) = LoverSelect(strategy="majority", extract="number").apply([[_result([("x", 0.1), ("it is 6", 0.1)])]], [{}])
    assert out == ["6"]


def test_no_valid_answer_outputs_empty_string():
    (out,) = LoverSelect(strategy="lover_sum").apply([[_result([("hmm", 0.5), ("?", 0.5)], [0.9, 0.9])]], [{}])
    assert out == [""]


def test_pass_at_n_is_an_oracle_over_all_branches():
    select = LoverSelect(strategy="pass_at_n", extract="number", gold="target")
    assert select.apply([[_result(TEXTS)]], [{"target": "9"}]) == [["9"]]
    assert select.apply([[_result(TEXTS)]], [{"target": "42"}]) == [["8"]]  # miss: majority answer


def test_span_confidence_averages_margins_of_tokens_overlapping_the_answer():
    # Tokens "The " "ans" "wer is " "1" "8" "." with margins 0.1 0.2 0.3 0.6 0.8 0.05
    text = "The answer is 18."
    offsets = [(0, 4), (4, 7), (7, 14), (14, 15), (15, 16), (16, 17)]
    margins = [0.1, 0.2, 0.3, 0.6, 0.8, 0.05]
    answer = extract_number(text)
    assert (answer.start, answer.end) == (14, 16)
    assert span_confidence(margins, offsets, answer) == pytest.approx((0.6 + 0.8) / 2)
    # A token that straddles the span start counts too: "is 1" + "8."
    assert span_confidence([0.4, 0.2], [(11, 15), (15, 17)], Answer("18", 14, 16)) == pytest.approx(0.3)
    assert span_confidence(margins, offsets, None) == 0.0


def test_errors_name_the_bad_value_and_the_fix():
    with pytest.raises(ValueError, match="strategy='best'"):
        LoverSelect(strategy="best")
    with pytest.raises(ValueError, match="extract='digits' is not a known answer extractor"):
        LoverSelect(strategy="greedy", extract="digits")
    with pytest.raises(KeyError, match="verifier=PATH"):
        LoverSelect(strategy="lover_sum").apply([[_result(TEXTS)]], [{}])
    with pytest.raises(ValueError, match="needs lover_hf results"):
        LoverSelect(strategy="cot_sum").apply([["The answer is 3."]], [{}])
    assert LoverSelect(strategy="majority").apply([["The answer is 3."]], [{}]) == [["3"]]


def test_scores_fit_with_another_extractor_are_refused_with_the_fix():
    result = _result(TEXTS, [0.1, 0.5, 0.6, 0.99, 0.8])
    result.fit_extract = "number"  # as lover_hf's test-time fit with its default extract=number
    assert LoverSelect(strategy="lover_sum", extract="number").apply([[result]], [{}]) == [["8"]]
    with pytest.raises(ValueError, match="extract=number.*filters extract yes_no.*pass extract=yes_no"):
        LoverSelect(strategy="lover_sum", extract="yes_no").apply([[result]], [{}])
    # strategies that do not read the test-time fit's scores are unaffected
    assert LoverSelect(strategy="majority", extract="yes_no").apply([[result]], [{}]) == [[""]]


def test_scores_within_the_tolerance_tie_and_the_larger_group_wins():
    """Branch answers 5, 6, 6 with LoVer scores 0.5004, 0.5000, 0.4999 (a verifier sitting at 0.5, scores differing by
    float noise): lover_max sees 5 -> 0.5004 and 6 -> 0.5000, within TIE_TOLERANCE = 1e-3: a tie, and the larger
    group (6, two branches) wins instead of the noise. 0.502 vs 0.500 is a real difference (2e-3 > 1e-3): 5 wins.
    Equal-size tied groups go to the lowest branch index (5, branch 0)."""
    texts = [("it is 5", 0.5), ("it is 6", 0.5), ("it is 6", 0.5)]
    pick = lambda strategy, scores: LoverSelect(strategy=strategy, extract="number").apply(  # noqa: E731
        [[_result(texts, scores)]], [{}])[0][0]
    assert pick("lover_max", [0.5004, 0.5000, 0.4999]) == "6"
    assert pick("lover_max", [0.502, 0.500, 0.499]) == "5"
    assert pick("lover_max", [0.5, 0.5, 0.1]) == "6"
    two = [("it is 5", 0.5), ("it is 6", 0.5)]
    assert LoverSelect(strategy="lover_max", extract="number").apply([[_result(two, [0.5, 0.5005])]], [{}]) == [["5"]]


def _cut(text: str, margin: float) -> Branch:
    """A branch the token budget stopped (finish_reason `length`)."""
    return Branch(text, list(range(len(text))), [margin] * len(text), [(i, i + 1) for i in range(len(text))], "length")


def test_a_cut_branch_states_no_fallback_answer_but_keeps_a_marked_one():
    """Rule R (RESULTS run 19 A). Branches: "The answer is 5." (eos), "...daily for $2 per fresh duck" (cut, no
    marker: its 2 is where the budget stopped it), "...for $2 per duck" (cut), "The answer is 7. Then 2" (cut after a
    marked answer). Stated answers: 5, none, none, 7 -> majority ties 5 and 7 (one vote each) and the tie goes to the
    lowest branch, 5; today's reading would have voted 2, 2 and won with 2. Greedy reads branch 0 as lm-eval does."""
    from lover_lmeval.core.select.answers import get_extractor, stated_answer
    from lover_lmeval.core.select.selection import select

    extract = get_extractor("number")
    branches = [_branch("The answer is 5.", 0.5), _cut("sells at the market daily for $2 per fresh duck", 0.5),
                _cut("sells for $2 per duck", 0.5), _cut("The answer is 7. Then 2", 0.5)]
    assert [a.value if (a := stated_answer(extract, b)) else None for b in branches] == ["5", None, None, "7"]
    result = LoverResult(branches, np.zeros((4, 2, 3), np.float32), None)
    assert select(result, "majority", extract) == "5"
    cut_first = LoverResult(branches[1:], np.zeros((3, 2, 3), np.float32), None)
    assert select(cut_first, "greedy", extract) == "2"  # greedy: branch 0's fallback answer, as lm-eval scores it
    assert select(cut_first, "majority", extract) == "7"  # the only stated answer
    assert stated_answer(extract, _branch("for $2 per duck", 0.5)).value == "2"  # finished: the fallback stands
