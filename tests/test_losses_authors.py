"""The authors' reductions (regime=authors) pinned to hand-worked values and to a slow loop reference."""

from __future__ import annotations

import math
import random

import pytest
import torch
from float_bounds import condition_tolerance, printed_rounding

from lover_lmeval.core.verify.loss_spec import loss_terms
from lover_lmeval.core.verify.losses import sample_pairs, sample_representatives
from lover_lmeval.core.verify.losses_authors import (
    bucket_mean,
    intra_group_loss_representative,
    inter_raw_loss_bucketed,
    negation_loss_representative,
)
from lover_lmeval.core.verify.verifier import REGIMES, Verifier, VerifierConfig, config_from_string, fit

# Two questions, three branches each. Question 0: branches 0 and 1 answer "a", branch 2 answers "b" (2 groups);
# question 1: three different answers (3 groups).
P_POS = torch.tensor([[0.9, 0.7, 0.2], [0.5, 0.4, 0.1]])
P_NEG = torch.tensor([[0.2, 0.4, 0.6], [0.5, 0.3, 0.8]])
GROUPS = torch.tensor([[0, 0, 1], [0, 1, 2]])
MASK = torch.ones(2, 3, dtype=torch.bool)
# Representatives: question 0 takes branch 1 for "a" and branch 2 for "b"; question 1 its only branches.
REPS = (torch.tensor([[1, 2, 0], [0, 1, 2]]), torch.tensor([[True, True, False], [True, True, True]]))
# The one pair: question 0's group "a", branches (0, 1).
PAIRS = (torch.tensor([[0, 0, 0], [0, 0, 0]]), torch.tensor([[1, 0, 0], [0, 0, 0]]),
         torch.tensor([[True, False, False], [False, False, False]]))
# The roundings on one path of these reductions (the representative's gather, p log2 p counted 3, the sums over a
# question's groups and the questions of a bucket, the buckets' mean) for 7 x 6 inputs at most.
TERMS = 24


def bound(fn, *inputs):
    """How far float32 rounding can move `fn(*inputs)` from its exact value (tests/float_bounds.py)."""
    return condition_tolerance(fn, inputs, TERMS)


def inter_raw_by_hand(questions):
    """The docstring's inter_raw in float64: per question (sum p - 1)^2 + mean of -p log2 p, bucketed by G."""
    buckets = {}
    for ps in questions:
        buckets.setdefault(len(ps), []).append((sum(ps) - 1) ** 2 - sum(p * math.log2(p) for p in ps) / len(ps))
    return sum(sum(v) / len(v) for v in buckets.values()) / len(buckets)


def test_negation_on_representatives_by_hand():
    """Five representatives, pooled: min(p+, p-)^2 + (p+ + p- - 1)^2 each.

    q0 b1 (0.7, 0.4): 0.16 + 0.01 = 0.17;  q0 b2 (0.2, 0.6): 0.04 + 0.04 = 0.08;
    q1 b0 (0.5, 0.5): 0.25 + 0    = 0.25;  q1 b1 (0.4, 0.3): 0.09 + 0.09 = 0.18;  q1 b2 (0.1, 0.8): 0.01 + 0.01 = 0.02.
    Mean of five: 0.70 / 5 = 0.14 (the paper's sum over every branch would give another number).
    """
    nega = lambda pp, pn: negation_loss_representative(pp, pn, MASK, GROUPS, reps=REPS)  # noqa: E731
    assert float(nega(P_POS, P_NEG)) == pytest.approx(0.14, abs=bound(nega, P_POS, P_NEG))


def test_intra_group_on_one_pair_by_hand():
    """One group with two branches, pair (0, 1) of question 0: (0.9 - 0.7)^2 + (0.2 - 0.4)^2 = 0.04 + 0.04 = 0.08;
    the mean over that one pair is 0.08. Without any group of two branches the term is 0."""
    intra = lambda pp, pn: intra_group_loss_representative(pp, pn, MASK, GROUPS, pairs=PAIRS)  # noqa: E731
    assert float(intra(P_POS, P_NEG)) == pytest.approx(0.08, abs=bound(intra, P_POS, P_NEG))
    none = (PAIRS[0], PAIRS[1], torch.zeros(2, 3, dtype=torch.bool))
    assert float(intra_group_loss_representative(P_POS, P_NEG, MASK, GROUPS, pairs=none)) == 0.0


def test_inter_raw_averaged_within_group_count_buckets_by_hand():
    """Per question: (sum_k p_k - 1)^2 + (1/G) sum_k -p_k log2 p_k over the representatives' p+.

    q0, p = (0.7, 0.2): 0.01 + (0.360201 + 0.464386) / 2 = 0.422293;
    q1, p = (0.5, 0.4, 0.1): 0 + (0.5 + 0.528771 + 0.332193) / 3 = 0.453655.
    One question per bucket (G = 2, G = 3): (0.422293 + 0.453655) / 2 = 0.437974.
    A third question with G = 2 and p = (0.5, 0.5), value 0 + 1/2 = 0.5, joins q0's bucket:
    ((0.422293 + 0.5) / 2 + 0.453655) / 2 = 0.457401, where a plain mean over questions gives 0.458649.
    """
    two = inter_raw_by_hand([(0.7, 0.2), (0.5, 0.4, 0.1)])
    assert two == pytest.approx(0.437974, abs=printed_rounding(6))
    inter_raw = lambda pp: inter_raw_loss_bucketed(pp, MASK, GROUPS, reps=REPS)  # noqa: E731
    assert float(inter_raw(P_POS)) == pytest.approx(two, abs=bound(inter_raw, P_POS))
    p_pos = torch.cat([P_POS, torch.tensor([[0.5, 0.5, 0.0]])])
    groups = torch.cat([GROUPS, torch.tensor([[0, 1, 0]])])
    mask = torch.cat([MASK, torch.tensor([[True, True, False]])])
    reps = (torch.cat([REPS[0], torch.tensor([[0, 1, 0]])]), torch.cat([REPS[1], torch.tensor([[True, True, False]])]))
    three = inter_raw_by_hand([(0.7, 0.2), (0.5, 0.4, 0.1), (0.5, 0.5)])
    assert three == pytest.approx(0.457401, abs=printed_rounding(6))
    inter_raw = lambda pp: inter_raw_loss_bucketed(pp, mask, groups, reps=reps)  # noqa: E731
    assert float(inter_raw(p_pos)) == pytest.approx(three, abs=bound(inter_raw, p_pos))


def _loop_reference(p_pos, p_neg, mask, groups, reps, pairs):
    """The authors' reductions written as plain loops over questions and groups (slow, obviously right)."""
    nega, intra, buckets = [], [], {}
    for q in range(p_pos.shape[0]):
        members = {}
        for i in range(p_pos.shape[1]):
            if mask[q, i]:
                members.setdefault(int(groups[q, i]), []).append(i)
        reps_p = []
        for k in members:
            a = int(reps[0][q, k])
            pos, neg = float(p_pos[q, a]), float(p_neg[q, a])
            nega.append(min(pos, neg) ** 2 + (pos + neg - 1) ** 2)
            reps_p.append(pos)
            if len(members[k]) > 1:
                i, j = int(pairs[0][q, k]), int(pairs[1][q, k])
                intra.append((float(p_pos[q, i]) - float(p_pos[q, j])) ** 2
                             + (float(p_neg[q, i]) - float(p_neg[q, j])) ** 2)
        if reps_p:
            value = (sum(reps_p) - 1) ** 2 - sum(p * math.log2(max(p, 1e-8)) for p in reps_p) / len(reps_p)
            buckets.setdefault(len(reps_p), []).append(value)
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    return mean(nega), mean(intra), mean([mean(v) for v in buckets.values()])


@pytest.mark.parametrize("seed", range(5))
def test_vectorised_reductions_match_the_loop_reference(seed):
    rng = random.Random(seed)
    q_count, n = 7, 6
    gen = torch.Generator().manual_seed(seed)
    p_pos, p_neg = torch.rand(q_count, n, generator=gen), torch.rand(q_count, n, generator=gen)
    mask = torch.tensor([[i < rng.randint(1, n) for i in range(n)] for _ in range(q_count)])
    groups = torch.tensor([[rng.randint(0, 2) for _ in range(n)] for _ in range(q_count)])
    reps, pairs = sample_representatives(groups, mask, gen), sample_pairs(groups, mask, gen)
    want = _loop_reference(p_pos, p_neg, mask, groups, reps, pairs)
    reductions = (lambda pp, pn: negation_loss_representative(pp, pn, mask, groups, reps=reps),
                  lambda pp, pn: intra_group_loss_representative(pp, pn, mask, groups, pairs=pairs),
                  lambda pp, pn: inter_raw_loss_bucketed(pp, mask, groups, reps=reps))
    for reduction, w in zip(reductions, want):
        tolerance = bound(reduction, p_pos, p_neg)
        assert float(reduction(p_pos, p_neg)) == pytest.approx(w, abs=tolerance)
        assert float(reduction(p_pos, p_neg)) + 4 * tolerance != pytest.approx(w, abs=tolerance)  # a planted error


def test_sampled_pairs_are_two_distinct_members_of_their_group():
    gen = torch.Generator().manual_seed(0)
    groups = torch.tensor([[0, 0, 1, 0, 2, 2]])
    mask = torch.tensor([[True, True, True, True, True, False]])
    for _ in range(20):
        first, second, has_pair = sample_pairs(groups, mask, gen)
        assert has_pair[0].tolist()[:3] == [True, False, False]  # branch 5 is padding: group 2 has one branch
        assert first[0, 0] != second[0, 0] and {int(first[0, 0]), int(second[0, 0])} <= {0, 1, 3}


def test_representative_reduction_is_dispatched_by_name():
    """`reduction="representative"` swaps in the authors' nega, intra and inter_raw; balance keeps its own."""
    draws = {"reps": REPS, "pairs": PAIRS}
    values = loss_terms(P_POS, P_NEG, MASK, GROUPS, ["nega", "intra", "inter_raw", "balance"],
                        answer_ids=torch.zeros(2, 3, dtype=torch.long), reduction="representative", draws=draws)
    # the functions the hand-worked tests above pin, on the same inputs and draws: equal
    assert float(values["nega"]) == float(negation_loss_representative(P_POS, P_NEG, MASK, GROUPS, reps=REPS))
    assert float(values["intra"]) == float(intra_group_loss_representative(P_POS, P_NEG, MASK, GROUPS, pairs=PAIRS))
    assert float(values["inter_raw"]) == float(inter_raw_loss_bucketed(P_POS, MASK, GROUPS, reps=REPS))
    own = loss_terms(P_POS, P_NEG, MASK, GROUPS, ["balance"], answer_ids=torch.zeros(2, 3, dtype=torch.long),
                     draws=draws)
    assert float(values["balance"]) == float(own["balance"])  # the same function on the same inputs
    assert bucket_mean(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([2, 2, 0])) == 2.0  # (1 + 3) / 2: exact in float32


def test_regime_authors_preset_and_single_field_overrides():
    config = config_from_string("regime=authors")
    assert config.regime == "authors"
    for key, value in REGIMES["authors"].items():
        assert getattr(config, key) == value
    changed = config_from_string("lr=1e-4;regime=authors")  # order does not matter; the key overrides the preset
    assert changed.lr == 1e-4 and changed.reduction == "representative" and changed.epochs == 5000
    assert config_from_string("").regime == "ours" and config_from_string("").reduction == "all"
    with pytest.raises(ValueError, match="regime"):
        config_from_string("regime=paper")


def test_xavier_init_has_zero_biases_and_one_hidden_layer():
    verifier = Verifier(8, VerifierConfig.from_regime("authors"))
    linears = [m for m in verifier.mlp if isinstance(m, torch.nn.Linear)]
    assert [tuple(m.weight.shape) for m in linears] == [(100, 8), (1, 100)]
    assert all(float(m.bias.detach().abs().sum()) == 0.0 for m in linears)


def test_authors_regime_fits_and_keeps_one_draw_between_resamples(monkeypatch):
    """A short authors-regime fit runs end to end; with resample_every=4 over 10 epochs the representatives are drawn
    at the start and before epochs 3 and 7 ((epoch + 1) % 4 == 0), as the authors' loop does."""
    from lover_lmeval.core.verify.fit_steps import FitSteps

    calls = []
    real_draw = FitSteps.draw
    monkeypatch.setattr(FitSteps, "draw", lambda *a: calls.append(1) or real_draw(*a))
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(12, 4, 2, 16, generator=gen)
    groups = torch.randint(0, 3, (12, 4), generator=gen)
    mask = torch.ones(12, 4, dtype=torch.bool)
    config = VerifierConfig.from_regime("authors", epochs=10, resample_every=4, restarts=1, lr=1e-3)
    result = fit(features, mask, groups, config)
    assert len(calls) == 3
    assert set(result.final_losses) == {"nega", "intra", "inter_raw", "total"}
    assert all(math.isfinite(v) for v in result.final_losses.values())


def test_pairs_with_a_single_branch_are_absent_not_an_error():
    first, second, has_pair = sample_pairs(torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1, dtype=torch.bool))
    assert not has_pair.any() and first.shape == second.shape == (3, 1)


def test_inter_with_the_representative_reduction_is_bucketed_too():
    """inter's per-question values bucketed like inter_raw's: q0 and q1 sit in different buckets, so the bucket mean
    equals the mean over the two questions; the paper's (question-mean) value is the same here."""
    values = loss_terms(P_POS, P_NEG, MASK, GROUPS, ["inter"], reduction="representative", draws={"reps": REPS})
    paper = loss_terms(P_POS, P_NEG, MASK, GROUPS, ["inter"], draws={"reps": REPS})
    # two float32 orders of one mean, each within float_bounds' bound of the exact value
    tolerance = sum(bound(lambda pp: loss_terms(pp, P_NEG, MASK, GROUPS, ["inter"], draws={"reps": REPS},
                                                **kw)["inter"], P_POS) for kw in ({"reduction": "representative"}, {}))
    assert float(values["inter"]) == pytest.approx(float(paper["inter"]), abs=tolerance)
