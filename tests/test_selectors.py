"""The token-statistics selectors (core/select/selectors.py) on hand-made branches: each docstring's three-branch
example through `lover_select`, ties, empty paths, missing statistics, the window minimum against a slow loop, and that
no selector reads the gold answer."""

from __future__ import annotations

from fractions import Fraction
from math import ceil

import numpy as np
import pytest

import lover_lmeval.core.select.selectors  # noqa: F401  registers the selectors (lover_lmeval.core imports it too)
from lover_lmeval.core.select.answers import extract_number
from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.results import LoverResult
from lover_lmeval.core.select.selection import ORACLES, STRATEGIES, Question
from lover_lmeval.core.select.selectors import kept_count, lowest_window_mean
from lover_lmeval.harness.filter import LoverSelect

STAT_NAMES = ("logprob", "topk_logprob", "entropy", "kl_uniform")  # token_stats.STAT_NAMES
NEW = ("self_certainty", "self_certainty_borda", "deepconf10_w32", "deepconf90_w32", "cisc_t0.1", "loglik_max",
       "loglik_vote", "short3")
READ_STATS = tuple(s for s in NEW if s != "short3")  # short3 reads token counts only


def _branch(text: str, n: int | None = None, has_stats: bool = True, **values) -> Branch:
    """A branch of `n` tokens (default: as many as the given statistics) whose per-token statistics are `values`
    (name -> list; names not given are zeros). `stats` is set as an attribute, which works with and without the
    `Branch.stats` field."""
    n = len(next(iter(values.values()))) if n is None else n
    branch = Branch(text, list(range(n)), [0.5] * n, [(0, 0)] * n, "eos")
    branch.stats = {name: list(values.get(name, [0.0] * n)) for name in STAT_NAMES} if has_stats else None
    return branch


def _pick(strategy: str, branches: list[Branch]) -> str:
    result = LoverResult(branches, np.zeros((len(branches), 2, 3), np.float32))
    (out,) = LoverSelect(strategy=strategy, extract="number").apply([[result]], [{}])
    assert type(out[0]) is str
    return out[0]


# The docstrings' examples.
SELF_CERTAINTY = [_branch("it is 5", kl_uniform=[2, 4]), _branch("it is 6", kl_uniform=[1, 2, 3]),
                  _branch("it is 6", kl_uniform=[2.5])]
DEEPCONF = [_branch("it is 5", topk_logprob=[-7.0] * 8 + [-5.0] * 32), _branch("it is 6", topk_logprob=[-5.2] * 10),
            _branch("it is 5", topk_logprob=[-6.5] + [-4.5] * 32)]
LOGLIK = [_branch("it is 5", logprob=[-0.05, -0.15]), _branch("it is 6", logprob=[-0.3]),
          _branch("it is 6", logprob=[-0.2, -0.5, -0.35])]


def test_the_selectors_are_registered_label_free_strategies():
    for strategy in NEW:
        assert strategy in STRATEGIES and strategy not in ORACLES
        LoverSelect(strategy=strategy)  # check_strategy accepts it


def test_self_certainty_and_its_borda_vote():
    """Answers 5, 6, 6; kl_uniform [2, 4], [1, 2, 3], [2.5] -> s = 3, 2, 2.5.
    self_certainty: 5 -> 3, 6 -> max(2, 2.5) = 2.5: "5".
    Borda (p = 0.5, N = 3): ranks 1, 3, 2 -> votes sqrt(3), sqrt(1), sqrt(2) = 1.732, 1, 1.414: 5 -> 1.732,
    6 -> 2.414: "6"."""
    assert _pick("self_certainty", SELF_CERTAINTY) == "5"
    assert _pick("self_certainty_borda", SELF_CERTAINTY) == "6"
    assert _pick("majority", SELF_CERTAINTY) == "6"


def test_borda_votes_come_from_ranks_not_from_score_gaps():
    """Answers 5, 6, 7, (none) with s = 9, 1.1, 1.0, 8 (N = 4): ranks 1, 3, 4, 2 -> votes sqrt(4), sqrt(2), sqrt(1)
    (the answerless branch's sqrt(3) is not cast): 5 -> 2, 6 -> 1.414, 7 -> 1: "5".
    Answers 5, (none) x 3, 6, 6 with s = 9, 8, 7, 6, 1, 0.5 (N = 6, ranks in branch order): 5 -> sqrt(6) = 2.449,
    6 -> sqrt(2) + sqrt(1) = 2.414: "5", where majority (p = 0) says 6 (and p = 0.25 would too: 1.565 < 2.189)."""
    four = [_branch("it is 5", kl_uniform=[9]), _branch("it is 6", kl_uniform=[1.1]),
            _branch("it is 7", kl_uniform=[1.0]), _branch("no idea", kl_uniform=[8])]
    assert _pick("self_certainty_borda", four) == "5"
    six = [_branch(text, kl_uniform=[s]) for text, s in
           (("it is 5", 9), ("no idea", 8), ("no", 7), ("hmm", 6), ("it is 6", 1), ("it is 6", 0.5))]
    assert _pick("self_certainty_borda", six) == "5"
    assert _pick("majority", six) == "6"


def test_deepconf_keeps_the_top_traces_by_their_lowest_window():
    """C = -topk_logprob. Answers 5, 6, 5. Trace 0: 40 tokens, C = 7 for 8 then 5: windows (start s = 0..8) have mean
    5 + 2 (8 - s) / 32, lowest 5.0 (whole-path mean (56 + 160) / 40 = 5.4). Trace 1: 10 tokens of 5.2 (< W = 32: one
    window): 5.2. Trace 2: 6.5 then 32 tokens of 4.5: windows 146 / 32 = 4.5625 and 4.5: 4.5.
    eta = 10 keeps ceil(0.3) = 1 trace, trace 1: "6" (by whole-path means trace 0 would win: 5.4 > 5.2).
    eta = 90 keeps ceil(2.7) = 3: 5 -> 5.0 + 4.5 = 9.5, 6 -> 5.2: "5"."""
    confidence = [-np.array(b.stats["topk_logprob"]) for b in DEEPCONF]
    assert [lowest_window_mean(c) for c in confidence] == pytest.approx([5.0, 5.2, 4.5])
    assert confidence[0].mean() == pytest.approx(5.4)
    assert _pick("deepconf10_w32", DEEPCONF) == "6"
    assert _pick("deepconf90_w32", DEEPCONF) == "5"


def test_deepconf_ranks_only_the_traces_with_an_answer():
    """Answers (none), 5, 6 with lowest windows 9, 3, 4 (paths shorter than W): the answerless trace is not among the
    kept ones: eta = 10 keeps ceil(0.2) = 1 of the 2 answered traces, the 6 (4 > 3): "6", not ""."""
    branches = [_branch("no idea", topk_logprob=[-9.0]), _branch("it is 5", topk_logprob=[-3.0]),
                _branch("it is 6", topk_logprob=[-4.0])]
    assert _pick("deepconf10_w32", branches) == "6"
    assert _pick("deepconf90_w32", branches) == "6"  # both kept: 5 -> 3, 6 -> 4


def test_cisc_and_the_loglik_selectors():
    """Answers 5, 6, 6; logprobs [-0.05, -0.15], [-0.3], [-0.2, -0.5, -0.35] -> c = -0.1, -0.3, -0.35.
    cisc_t0.1: c / 0.1 = -1, -3, -3.5; exp = 0.36788, 0.04979, 0.03020 (sum 0.44787); w = 0.8214, 0.1112, 0.0674:
    5 -> 0.8214, 6 -> 0.1786: "5".
    loglik_max: 5 -> -0.1, 6 -> -0.3: "5".
    loglik_vote: exp(c) = 0.90484, 0.74082, 0.70469: 5 -> 0.90484, 6 -> 1.44551: "6"."""
    assert _pick("cisc_t0.1", LOGLIK) == "5"
    assert _pick("loglik_max", LOGLIK) == "5"
    assert _pick("loglik_vote", LOGLIK) == "6"


def test_cisc_temperature_decides_between_confidence_and_count():
    """c = -0.1 (answer 5) and -0.15, -0.15 (answer 6): c / 0.1 = -1, -1.5, -1.5 -> exp 0.36788, 0.22313, 0.22313:
    5 -> 0.36788 < 6 -> 0.44626 (before normalising; the ratio is what decides): "6". With c = -0.1 vs -0.2, -0.2:
    exp(-1) = 0.36788 > 2 exp(-2) = 0.27067: "5"."""
    close, far = ([_branch("it is 5", logprob=[-0.1])] + [_branch("it is 6", logprob=[c]) for _ in range(2)]
                  for c in (-0.15, -0.2))
    assert _pick("cisc_t0.1", close) == "6"
    assert _pick("cisc_t0.1", far) == "5"


def test_short3_votes_among_the_three_shortest_paths():
    """Three branches: answers 5, 6, 6 with 9, 2, 4 tokens: all are the 3 shortest: "6". Five: plus (none) with 3
    tokens and 5 with 1: the 3 shortest are branches 4 (5), 1 (6), 3 (none): 5 -> 1 = 6 -> 1, a tie that goes to the
    lowest branch index, branch 1: "6"; majority over all five ties 2-2 and says 5 (branch 0). It reads token
    counts only: branches without statistics are fine."""
    three = [_branch("it is 5", 9, False), _branch("it is 6", 2, False), _branch("it is 6", 4, False)]
    assert _pick("short3", three) == "6"
    five = three + [_branch("no idea", 3, False), _branch("it is 5", 1, False)]
    assert _pick("short3", five) == "6"
    assert _pick("majority", five) == "5"
    # Equal lengths are cut by branch index: 4 branches of 2 tokens, answers 7, 7, 8, 8 -> branches 0-2 -> "7".
    assert _pick("short3", [_branch(f"it is {a}", 2, False) for a in (7, 7, 8, 8)]) == "7"


def _same(texts, n: int = 4) -> list[Branch]:
    """Branches with identical statistics: every score ties."""
    return [_branch(t, n, logprob=[-0.5] * n, topk_logprob=[-5.0] * n, kl_uniform=[2.0] * n) for t in texts]


@pytest.mark.parametrize("strategy", NEW)
def test_ties_resolve_like_every_other_strategy(strategy):
    """Identical statistics. Answers 5, 6, 6: tied scores go to the larger group, 6; Borda's ranks 1, 2, 3 (by branch
    index) give 5 -> sqrt(3) = 1.732 < 6 -> sqrt(2) + 1 = 2.414; deepconf10 keeps ceil(0.3) = 1 trace, branch 0 by
    index: "5". Answers 7, 6, 5 (equal groups): the lowest branch index, 7 (Borda: 1.732 > 1.414 > 1)."""
    assert _pick(strategy, _same(["it is 5", "it is 6", "it is 6"])) == ("5" if strategy == "deepconf10_w32" else "6")
    assert _pick(strategy, _same(["it is 7", "it is 6", "it is 5"])) == "7"


@pytest.mark.parametrize("strategy", ["self_certainty", "loglik_max"])
def test_max_scores_within_the_tolerance_tie(strategy):
    """5 -> 2.0004 vs 6 -> max(2.0, 1.0): within TIE_TOLERANCE = 1e-3, a tie: the larger group, 6. 2.002: "5"."""
    name = "kl_uniform" if strategy == "self_certainty" else "logprob"
    branches = lambda top: [_branch("it is 5", **{name: [top]}), _branch("it is 6", **{name: [2.0]}),  # noqa: E731
                            _branch("it is 6", **{name: [1.0]})]
    assert _pick(strategy, branches(2.0004)) == "6"
    assert _pick(strategy, branches(2.002)) == "5"


@pytest.mark.parametrize("strategy", READ_STATS)
def test_an_empty_path_scores_lowest_and_wins_only_by_ties(strategy):
    """A path without tokens (given an answer here to test the rule) has no mean: score -inf, weight 0. Against
    answer 6 with logprob -2 (exp = 0.135), C = 5, kl 1: "6" everywhere (Borda: 6 rank 1, sqrt(2) > 5's sqrt(1)).
    Two empty paths tie everywhere: the lowest branch index, "5"."""
    empty = _branch("it is 5", 0)
    assert _pick(strategy, [empty, _branch("it is 6", logprob=[-2.0], topk_logprob=[-5.0], kl_uniform=[1.0])]) == "6"
    assert _pick(strategy, [empty, _branch("it is 6", 0)]) == "5"


@pytest.mark.parametrize("strategy", READ_STATS)
def test_missing_statistics_raise_with_the_fix(strategy):
    branches = [_branch("it is 5", 2), _branch("it is 6", 2, has_stats=False)]
    with pytest.raises(ValueError,
                       match=rf"strategy='{strategy}'.*branch 1 has stats=None.*benchmarks/selectors/rescore_bank"):
        _pick(strategy, branches)
    partial = _branch("it is 6", 2)
    del partial.stats["kl_uniform"], partial.stats["logprob"], partial.stats["topk_logprob"]
    with pytest.raises(ValueError, match=r"branch 1's stats hold only \['entropy'\].*rescore_bank"):
        _pick(strategy, [_branch("it is 5", 2), partial])
    with pytest.raises(ValueError, match="needs lover_hf results"):
        LoverSelect(strategy=strategy).apply([["The answer is 3."]], [{}])


def test_the_window_minimum_matches_a_slow_loop():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 31, 32, 33, 100, 512):
        for window in (1, 3, 32):
            c = rng.gamma(2.0, 2.0, n)
            slow = c.mean() if n <= window else min(c[s:s + window].mean() for s in range(n - window + 1))
            assert lowest_window_mean(c, window) == pytest.approx(slow, rel=1e-12), (n, window)
    assert lowest_window_mean(np.array([])) == -np.inf


def test_kept_count_is_the_exact_ceiling():
    """ceil(eta / 100 * n), at least 1, for eta = 10, 90 and n = 0..200 (e.g. 90 % of 10 = 9, 10 % of 3 -> 1)."""
    assert (kept_count(90, 10), kept_count(10, 10), kept_count(10, 3), kept_count(90, 3), kept_count(10, 0)) == \
        (9, 1, 1, 3, 1)
    for eta in (10, 90):
        assert all(kept_count(eta, n) == max(1, ceil(Fraction(eta * n, 100))) for n in range(201))


class _GoldTrap(Question):
    """A question whose gold answer fails the test when read."""

    @property
    def gold(self):
        raise AssertionError("a selector read the gold answer")

    @gold.setter
    def gold(self, value) -> None:
        pass


@pytest.mark.parametrize("strategy", sorted(set(STRATEGIES) - ORACLES))
def test_no_selector_reads_the_gold_answer(strategy):
    """Every label-free strategy, old and new: the same pick whatever the gold answer (right, wrong, scrambled,
    missing), and none even reads the field (pass_at_n, the oracle, does: the trap works)."""
    for branches in (SELF_CERTAINTY, DEEPCONF, LOGLIK):
        # every scorer a strategy can read: LoVer's, the plain probes', P(True)'s (selection.SCORES_READ)
        probs = {name: np.array([[s, 1 - s] for s in (0.2, 0.7, 0.4)]) for name in ("lover", "ccs", "pca", "ptrue")}
        result = LoverResult(branches, np.zeros((3, 2, 3), np.float32), probs)
        answers = [extract_number(b.text) for b in branches]
        picks = {STRATEGIES[strategy](Question(result, answers, "lover", gold)) for gold in ("5", "6", "999", None)}
        assert len(picks) == 1
        assert STRATEGIES[strategy](_GoldTrap(result, answers, "lover", "5")) in picks
    with pytest.raises(AssertionError, match="read the gold"):
        STRATEGIES["pass_at_n"](_GoldTrap(result, answers, "lover", "5"))
