"""The 2025 selectors on hand-made branches: inverse-entropy voting, Soft Self-Consistency's min, RPC
(its pruning by hand-fixed mixtures, its vote, its fit against a slow reference and against the authors' scipy
optimiser where scipy is installed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.results import LoverResult
from lover_lmeval.core.select.answers import Answer
from lover_lmeval.core.select.rpc import (INITIAL, fit_weibull_mixture, pruned, rpc_group_scores, weibull_log_pdf)
from lover_lmeval.core.select.selection import ORACLES, STRATEGIES
from lover_lmeval.core.select.selectors import ENTROPY_FLOOR, span_lowest_probability
from lover_lmeval.harness.filter import LoverSelect

STAT_NAMES = ("logprob", "topk_logprob", "entropy", "kl_uniform")
NEW = ("rpc", "inv_entropy_full", "softsc_min")


def _branch(text: str, offsets: list[tuple[int, int]] | None = None, **values) -> Branch:
    """A branch whose per-token statistics are `values` (names not given: zeros); offsets default to none overlapping
    any answer."""
    n = len(next(iter(values.values())))
    branch = Branch(text, list(range(n)), [0.5] * n, offsets or [(0, 0)] * n, "eos")
    branch.stats = {name: list(values.get(name, [0.0] * n)) for name in STAT_NAMES}
    return branch


def _pick(strategy: str, branches: list[Branch]) -> str:
    result = LoverResult(branches, np.zeros((len(branches), 2, 3), np.float32))
    (out,) = LoverSelect(strategy=strategy, extract="number").apply([[result]], [{}])
    return out[0]


def test_the_new_selectors_are_registered_label_free_strategies():
    for strategy in NEW:
        assert strategy in STRATEGIES and strategy not in ORACLES


def test_inverse_entropy_votes_by_one_over_the_mean_entropy():
    """Answers 5, 6, 6 with entropy [0.2, 0.4], [1, 1, 1], [2.0]: H = 0.3, 1.0, 2.0, w = 3.333, 1, 0.5:
    5 -> 3.333 > 6 -> 1.5: "5" (majority: 6). With entropy [0.8] for the 5: w = 1.25 < 1.5: "6". A path whose every
    token was certain (H = 0) weighs 1 / ENTROPY_FLOOR = 1000, not infinity: against 1000 paths of H = 0.999
    (1000 x 1.001 = 1001) it loses."""
    sixes = [_branch("it is 6", entropy=[1.0, 1.0, 1.0]), _branch("it is 6", entropy=[2.0])]
    assert _pick("inv_entropy_full", [_branch("it is 5", entropy=[0.2, 0.4]), *sixes]) == "5"
    assert _pick("majority", [_branch("it is 5", entropy=[0.2, 0.4]), *sixes]) == "6"
    assert _pick("inv_entropy_full", [_branch("it is 5", entropy=[0.8]), *sixes]) == "6"
    assert ENTROPY_FLOOR == 1e-3
    certain = [_branch("it is 5", entropy=[0.0, 0.0])] + [_branch("it is 6", entropy=[0.999])] * 1000
    assert _pick("inv_entropy_full", certain) == "6"
    assert _pick("inv_entropy_full", certain[:900]) == "5"  # 1000 > 899 x 1.001 = 899.9


# "it is 5": tokens "it" [0, 2), " is" [2, 5), " 5" [5, 7); the answer "5" is [6, 7).
FIVE = [(0, 2), (2, 5), (5, 7)]
# "it is 16": ..., " 1" [5, 7), "6" [7, 8); the answer "16" is [6, 8).
SIXTEEN = [(0, 2), (2, 5), (5, 7), (7, 8)]


def test_span_lowest_probability_reads_only_the_answer_tokens():
    """logprob [-9, -2, -0.1] on "it is 5": only " 5" overlaps the answer [6, 7): exp(-0.1) = 0.904837 (the -9 of
    "it" is reasoning, not the answer). On "it is 16" with [-0.01, -0.01, -0.05, -0.7]: tokens " 1" and "6" overlap
    [6, 8): min(exp(-0.05), exp(-0.7)) = 0.496585. No answer, or no overlapping token: 0."""
    assert span_lowest_probability(np.array([-9.0, -2.0, -0.1]), FIVE, Answer("5", 6, 7)) == \
        pytest.approx(0.904837, abs=1e-6)
    assert span_lowest_probability(np.array([-0.01, -0.01, -0.05, -0.7]), SIXTEEN, Answer("16", 6, 8)) == \
        pytest.approx(0.496585, abs=1e-6)
    assert span_lowest_probability(np.array([-0.1]), [(0, 2)], None) == 0.0
    assert span_lowest_probability(np.array([-0.1]), [(0, 2)], Answer("5", 6, 7)) == 0.0


def test_soft_self_consistency_min_takes_the_best_path_by_its_answer_s_weakest_token():
    """Answers 5, 16, 16: s = 0.905 (exp(-0.1)), 0.497, 0.497: 5 -> 0.905 > 16 -> 0.497 (group = max): "5" (majority:
    16). With the 5's answer token at logprob -1.0 (0.368): "16"."""
    sixteen = [_branch("it is 16", SIXTEEN, logprob=[-0.01, -0.01, -0.05, -0.7]) for _ in range(2)]
    assert _pick("softsc_min", [_branch("it is 5", FIVE, logprob=[-9.0, -2.0, -0.1]), *sixteen]) == "5"
    assert _pick("majority", [_branch("it is 5", FIVE, logprob=[-9.0, -2.0, -0.1]), *sixteen]) == "16"
    assert _pick("softsc_min", [_branch("it is 5", FIVE, logprob=[-0.1, -0.1, -1.0]), *sixteen]) == "16"


def test_weibull_log_density_hand_worked():
    """k = 2, lambda = 1 at x = 0.5: f = 2 * 0.5 * exp(-0.25) = 0.778801, log f = -0.25."""
    assert weibull_log_pdf(np.array(0.5), 2.0, 1.0) == pytest.approx(-0.25)
    assert math.exp(weibull_log_pdf(np.array(0.5), 2.0, 1.0)) == pytest.approx(0.778801, abs=1e-6)


# A mixture fixed by hand: w = 0.5, high component (k = 5, lambda = 0.9), low (k = 5, lambda = 0.3).
FIXED = (0.5, 5.0, 0.9, 5.0, 0.3)


def test_pruning_drops_low_component_paths_below_the_mean_only():
    """f(x; 5, lambda) = 5 / lambda (x / lambda)^4 exp(-(x / lambda)^5). At x = 0.35: high f = 5.5556 * 0.02287 *
    exp(-0.00889) = 0.1259, low f = 16.667 * 1.8526 * exp(-2.1614) = 3.557: low. At 0.85: high 5.5556 * 0.7956 *
    exp(-0.7514) = 2.085, low (z = 2.833, z^5 = 183.6) ~ 0: high. p = 0.9, 0.85, 0.35, 0.3 (mean 0.6): the two low
    ones lie below the mean: pruned. With p = 0.35, 0.3, 0.32 (mean 0.323) only 0.3 and 0.32 are below the mean: 0.35
    is kept although the low component claims it. p = 0 is always pruned; no fit (None) prunes only it."""
    assert pruned(np.array([0.9, 0.85, 0.35, 0.3]), FIXED).tolist() == [False, False, True, True]
    assert pruned(np.array([0.35, 0.3, 0.32]), FIXED).tolist() == [False, True, True]
    assert pruned(np.array([0.9, 0.0, 0.3]), None).tolist() == [False, True, False]


def _slow_pruned(p: list[float], fitted) -> list[bool]:
    """The pruning rule written as the authors' loop: per path, its two weighted densities and the mean."""
    w, k1, l1, k2, l2 = fitted
    mean = sum(p) / len(p)
    out = []
    for x in p:
        if x <= 0:
            out.append(True)
            continue
        f1 = k1 / l1 * (x / l1) ** (k1 - 1) * math.exp(-((x / l1) ** k1))
        f2 = k2 / l2 * (x / l2) ** (k2 - 1) * math.exp(-((x / l2) ** k2))
        out.append(w * f1 < (1 - w) * f2 and x < mean)
    return out


def test_vectorised_pruning_matches_the_slow_loop():
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = rng.uniform(0.05, 1.0, 10)
        fitted = (rng.uniform(0.2, 0.8), *rng.uniform(0.5, 8, 1), *rng.uniform(0.2, 1, 1), *rng.uniform(0.5, 8, 1),
                  *rng.uniform(0.2, 1, 1))
        assert pruned(p, fitted).tolist() == _slow_pruned(p.tolist(), fitted)


def test_the_vote_counts_identical_completions_once_and_skips_pruned_paths():
    """Answers 5, 5, 6, 6 with p = 0.9, 0.9 (one completion, twice), 0.5, 0.45: 5 -> 0.9 (once), 6 -> 0.95. With the
    0.45 pruned: 6 -> 0.5. Two different completions of equal p both count: 5 -> 1.8."""
    members = {"5": [0, 1], "6": [2, 3]}
    p = np.array([0.9, 0.9, 0.5, 0.45])
    same = ["The answer is 5.", "The answer is 5.", "6 it is: the answer is 6.", "The answer is 6."]
    keep = np.zeros(4, bool)
    assert rpc_group_scores(p, same, members, keep) == pytest.approx({"5": 0.9, "6": 0.95})
    assert rpc_group_scores(p, same, members, np.array([False, False, False, True])) == \
        pytest.approx({"5": 0.9, "6": 0.5})
    other = ["The answer is 5.", "So the answer is 5.", *same[2:]]
    assert rpc_group_scores(p, other, members, keep) == pytest.approx({"5": 1.8, "6": 0.95})


def test_the_mixture_fit_recovers_a_known_mixture_and_orders_its_components():
    """400 draws, 30% from Weibull(k = 8, lambda = 0.3) and 70% from Weibull(k = 8, lambda = 0.85): the fit finds the
    high component first (weight ~0.7, scale ~0.85) and the low one second (scale ~0.3)."""
    rng = np.random.default_rng(0)
    x = np.concatenate([0.3 * rng.weibull(8.0, 120), 0.85 * rng.weibull(8.0, 280)])
    w, k1, l1, k2, l2 = fit_weibull_mixture(x)
    assert w == pytest.approx(0.7, abs=0.05) and l1 == pytest.approx(0.85, abs=0.03) and \
        l2 == pytest.approx(0.3, abs=0.03)
    assert k1 == pytest.approx(8.0, rel=0.3) and k2 == pytest.approx(8.0, rel=0.3)


def _nll(params, x):
    w, k1, l1, k2, l2 = params
    return -np.sum(np.log(w * np.exp(weibull_log_pdf(x, k1, l1)) + (1 - w) * np.exp(weibull_log_pdf(x, k2, l2))))


def test_the_fit_reaches_the_likelihood_the_authors_scipy_optimiser_reaches():
    """On 50 random 10-path questions: our optimum's negative log-likelihood is within 1e-3 of scipy's L-BFGS-B (from
    the same start and bounds) or better on at least 85% of them, and both prune the same paths on at least 70%
    (measured: 91 and 78 of 100). The likelihood is multimodal on 10 points, so the two optimisers can stop at
    different optima, and the pruning follows the optimum: RPC's pruning is optimiser-dependent. scipy is not a
    dependency: skipped where it is not installed."""
    optimize = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(1)
    as_good = same = 0
    for _ in range(50):
        p = np.exp(-rng.uniform(0.01, 1.5, 10) ** rng.uniform(0.5, 2))
        ours = fit_weibull_mixture(p)
        theirs = optimize.minimize(_nll, list(INITIAL), args=(p,), bounds=[(0.2, 0.8)] + [(0.01, None)] * 4).x
        as_good += ours is not None and _nll(ours, p) <= _nll(theirs, p) + 1e-3
        w, a, b, c, d = theirs
        if b * math.gamma(1 + 1 / a) < d * math.gamma(1 + 1 / c):
            theirs = (1 - w, c, d, a, b)
        same += pruned(p, ours).tolist() == pruned(p, tuple(theirs)).tolist()
    assert as_good >= 42 and same >= 35, (as_good, same)
