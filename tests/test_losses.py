"""Tests for core.verify.losses and loss_spec: hand-worked values, loop references, degenerate solutions."""

import math

import pytest
import torch

from float_bounds import U32, condition_tolerance, printed_rounding

from lover_lmeval.core.verify import loss_spec as S
from lover_lmeval.core.verify import losses as L
from lover_lmeval.core.verify import losses_variants as V


def t(x):
    return torch.tensor(x, dtype=torch.float32)


# The deepest loss term's roundings (p_hat = p / (s + EPS), its clamp, the log counted twice, the product, the
# question's sum, the mean); each check adds its sums' lengths.
DEPTH = 8


def float32_and_bound(fn, *inputs, terms=DEPTH):
    """`fn(*inputs)` in float32 and how far float32 rounding can move it from the exact value (float_bounds)."""
    return fn(*inputs).item(), condition_tolerance(fn, inputs, terms)


def one_question(p_pos, p_neg, groups):
    """Wrap one question's branches as a (1, N) batch with every branch real."""
    n = len(p_pos)
    return t([p_pos]), t([p_neg]), torch.ones(1, n, dtype=torch.bool), torch.tensor([groups])


# ---------------------------------------------------------------- hand-worked values

def test_negation_hand_worked():
    """p+=[0.9,0.2], p-=[0.1,0.7] -> L_sum = 0^2 + (-0.1)^2 = 0.01,
    L_diff = min(0.9,0.1)^2 + min(0.2,0.7)^2 = 0.01 + 0.04 = 0.05, nega = 0.06."""
    pp, pn, m, g = one_question([0.9, 0.2], [0.1, 0.7], [0, 1])
    value, bound = float32_and_bound(lambda pp, pn: L.negation_loss(pp, pn, m), pp, pn)
    assert value == pytest.approx(0.06, abs=bound)


def test_negation_mean_over_questions_ignores_padding_and_empty_questions():
    """q0: p+=[0.9,0.2], p-=[0.1,0.7] -> 0.06;  q1: one real branch p+=p-=0.5 ->
    (0)^2 + 0.25 = 0.25 (its padded branch holds garbage 0.0/0.0 and is ignored);
    q2: no real branch -> excluded.  Mean = (0.06 + 0.25) / 2 = 0.155."""
    pp = t([[0.9, 0.2], [0.5, 0.0], [0.3, 0.3]])
    pn = t([[0.1, 0.7], [0.5, 0.0], [0.3, 0.3]])
    m = torch.tensor([[True, True], [True, False], [False, False]])
    value, bound = float32_and_bound(lambda pp, pn: L.negation_loss(pp, pn, m), pp, pn)
    assert value == pytest.approx(0.155, abs=bound)


def test_intra_hand_worked():
    """Same group: p+=[0.9,0.2], p-=[0.1,0.7] -> ordered pairs (0,1),(1,0):
    2*0.7^2 + 2*0.6^2 = 0.98 + 0.72 = 1.70.  Different groups -> 0."""
    pp, pn, m, g = one_question([0.9, 0.2], [0.1, 0.7], [0, 0])
    value, bound = float32_and_bound(lambda pp, pn: L.intra_group_loss(pp, pn, m, g), pp, pn)
    assert value == pytest.approx(1.70, abs=bound)
    pp, pn, m, g = one_question([0.9, 0.2], [0.1, 0.7], [1, 0])
    assert L.intra_group_loss(pp, pn, m, g).item() == 0.0  # no pair: a sum of nothing


def test_inter_hand_worked():
    """groups [0,0,1], p+=[0.6,0.6,0.2] (any representative gives 0.6, 0.2):
    (0.6+0.2-1)^2 = 0.04; p_hat=[0.75,0.25], H = -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.562335;
    L_inter = 0.602335."""
    pp, pn, m, g = one_question([0.6, 0.6, 0.2], [0.0, 0.0, 0.0], [0, 0, 1])
    expected = 0.04 - (0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    value, bound = float32_and_bound(lambda pp: L.inter_group_loss(pp, m, g, torch.Generator().manual_seed(0)), pp)
    assert value == pytest.approx(expected, abs=bound)
    assert expected == pytest.approx(0.602335, abs=printed_rounding(6))


def test_inter_raw_hand_worked():
    """groups [0,0,1], p+=[0.5,0.5,0.25]: (0.5+0.25-1)^2 = 0.0625; self-information
    -0.5 log2 0.5 - 0.25 log2 0.25 = 0.5 + 0.5 = 1.0, over G=2 groups -> 0.5; L = 0.5625."""
    pp, pn, m, g = one_question([0.5, 0.5, 0.25], [0.0, 0.0, 0.0], [0, 0, 1])
    value, bound = float32_and_bound(lambda pp: V.inter_raw_loss(pp, m, g, torch.Generator().manual_seed(0)), pp)
    assert value == pytest.approx(0.5625, abs=bound)


def test_all_false_corner_is_cheap_for_the_normalised_entropy_only():
    """5 groups, one branch each.  All false with one relatively larger, p+=[0.05, 1e-4 x4]:
    inter = (0.0504-1)^2 + H(p_hat) = 0.9017 + 0.0573 = 0.959, cheaper than an honest hedge p+=0.2 each
    (0 + ln 5 = 1.61): the normalised entropy prefers "everything false".  inter_raw ranks them the
    other way: all false 0.9017 + (0.2161 + 4*0.0013)/5 = 0.946 vs hedge 0 + log2(5)/5 = 0.464."""
    m, g = torch.ones(1, 5, dtype=torch.bool), torch.tensor([[0, 1, 2, 3, 4]])
    corner, hedge = t([[0.05, 1e-4, 1e-4, 1e-4, 1e-4]]), torch.full((1, 5), 0.2)
    for loss, printed in ((L.inter_group_loss, {"corner": 0.959, "hedge": math.log(5)}),
                          (V.inter_raw_loss, {"corner": 0.946, "hedge": math.log2(5) / 5})):
        for name, p in (("corner", corner), ("hedge", hedge)):
            value, bound = float32_and_bound(lambda p: loss(p, m, g), p, terms=DEPTH + 5)
            # the corner's values are printed to 3 decimals; the hedge's are exact
            assert value == pytest.approx(printed[name], abs=bound + (printed_rounding(3) if name == "corner" else 0))


def test_inter_logic_hand_worked():
    """Representatives p=[0.6, 0.2]: P(exactly one) = 0.6*0.8 + 0.2*0.4 = 0.56,
    loss = -ln 0.56 = 0.579818."""
    pp, pn, m, g = one_question([0.6, 0.6, 0.2], [0.0, 0.0, 0.0], [2, 2, 0])
    value, bound = float32_and_bound(lambda pp: V.inter_logic_loss(pp, m, g, torch.Generator().manual_seed(0)), pp)
    assert value == pytest.approx(-math.log(0.56 + L.EPS), abs=bound)
    assert -math.log(0.56) == pytest.approx(0.579818, abs=printed_rounding(6))


def test_supervised_hand_worked():
    """p+=[0.9,0.2], p-=[0.1,0.7], y=[1,0]:
    -ln0.9 - ln0.9 (branch 0) - ln0.8 - ln0.7 (branch 1) = 0.105361*2 + 0.223144 + 0.356675 = 0.790540."""
    pp, pn, m, g = one_question([0.9, 0.2], [0.1, 0.7], [0, 1])
    value, bound = float32_and_bound(lambda pp, pn: L.supervised_loss(pp, pn, m, t([[1.0, 0.0]])), pp, pn)
    assert value == pytest.approx(-2 * math.log(0.9) - math.log(0.8) - math.log(0.7), abs=bound)
    assert -2 * math.log(0.9) - math.log(0.8) - math.log(0.7) == pytest.approx(0.790540, abs=printed_rounding(6))


def test_score():
    """score = 0.5*(p+ + 1 - p-): (0.9, 0.1) -> 0.9; (0.2, 0.7) -> 0.25: in float32, the inputs each within u of
    their decimals, then p+ + 1 and - p- each rounded within u of 2, / 2 exact: within 3 u of a value <= 1."""
    assert torch.allclose(L.score(t([0.9, 0.2]), t([0.1, 0.7])), t([0.9, 0.25]), rtol=0, atol=3 * U32)


def test_balance_hand_worked():
    """Two questions, answers "yes" (id 0) and "no" (id 1) in both, min_questions=2.
    Constant "no" (p_hat = [0, 1] twice): c = (0, 1), chance u = (0.5, 0.5) -> mean(0.25, 0.25) = 0.25.
    q0 picks "yes", q1 "no": c = (0.5, 0.5) = u -> 0."""
    m = torch.ones(2, 2, dtype=torch.bool)
    g = torch.tensor([[0, 1], [0, 1]])
    ids = torch.tensor([[0, 1], [0, 1]])
    for p, expected in ((t([[0.0, 1.0], [0.0, 1.0]]), 0.25), (t([[1.0, 0.0], [0.0, 1.0]]), 0.0)):  # constant, split
        value, bound = float32_and_bound(lambda p: V.balance_loss(p, m, g, ids, min_questions=2), p)
        # c = 1 / (1 + EPS): the EPS of p_hat's denominator moves the exact value by EPS / 2 at most
        assert value == pytest.approx(expected, abs=bound + L.EPS / 2)


def test_balance_hand_worked_with_unanswered_group_and_threshold():
    """q0: answers [yes, no, none], p+ = [0.6, 0.2, 0.2] -> p_hat = [0.6, 0.2, 0.2], G = 3;
    q1: answers [yes, no], p+ = [0.5, 0.5] -> p_hat = [0.5, 0.5], G = 2.  Chance per answer: 1/3 + 1/2 = 5/6.
    yes: ((0.6 + 0.5) - 5/6) / 2 = 0.133333 -> 0.017778;  no: ((0.2 + 0.5) - 5/6) / 2 = -0.066667 -> 0.004444.
    Mean 0.011111; the unanswered branch counts only in G.  With min_questions=3 no answer qualifies -> 0."""
    pp = t([[0.6, 0.2, 0.2], [0.5, 0.5, 0.0]])
    m = torch.tensor([[True, True, True], [True, True, False]])
    g = torch.tensor([[0, 1, 2], [0, 1, 0]])
    ids = torch.tensor([[0, 1, -1], [0, 1, -1]])
    value, bound = float32_and_bound(lambda pp: V.balance_loss(pp, m, g, ids, min_questions=2), pp)
    # + EPS: the EPS in p_hat's denominator moves the exact value by less
    assert value == pytest.approx(((1.1 - 5 / 6) / 2) ** 2 / 2 + ((0.7 - 5 / 6) / 2) ** 2 / 2, abs=bound + L.EPS)
    assert ((1.1 - 5 / 6) / 2) ** 2 / 2 + ((0.7 - 5 / 6) / 2) ** 2 / 2 == pytest.approx(0.011111, abs=printed_rounding(6))
    assert V.balance_loss(pp, m, g, ids, min_questions=3).item() == 0.0


def test_balance_needs_answer_ids():
    pp, pn, m, g = one_question([0.9, 0.2], [0.1, 0.7], [0, 1])
    with pytest.raises(ValueError, match="answer_ids"):
        S.total_loss(pp, pn, m, g, "nega+balance")


def test_group_ids_out_of_range_rejected():
    pp, pn, m, g = one_question([0.9, 0.2], [0.1, 0.7], [0, 2])
    with pytest.raises(AssertionError, match="group ids"):
        L.intra_group_loss(pp, pn, m, g)


# ---------------------------------------------------------------- loop references on ragged batches

def ragged_batch(seed, q=7, n=9):
    """Random ragged batch: arbitrary (non-contiguous) group ids, garbage on padding, one empty question."""
    g = torch.Generator().manual_seed(seed)
    p_pos = torch.rand(q, n, generator=g)
    p_neg = torch.rand(q, n, generator=g)
    labels = (torch.rand(q, n, generator=g) > 0.5).float()
    mask = torch.zeros(q, n, dtype=torch.bool)
    groups = torch.randint(-3, 3 * n, (q, n), generator=g)  # garbage, overwritten on real branches
    for i in range(q - 1):  # the last question stays empty
        k = int(torch.randint(1, n + 1, (1,), generator=g))
        mask[i, :k] = True
        ids = torch.randperm(n, generator=g)[: int(torch.randint(1, k + 1, (1,), generator=g))]
        groups[i, :k] = ids[torch.randint(0, len(ids), (k,), generator=g)]
    return p_pos, p_neg, mask, groups, labels


def ref_groups(mask_row, group_row):
    out = {}
    for i, (real, gid) in enumerate(zip(mask_row.tolist(), group_row.tolist())):
        if real:
            out.setdefault(gid, []).append(i)
    return out


def ref_mean(per_q):
    vals = [v for v in per_q if v is not None]
    return sum(vals) / len(vals)


def ref_nega(pp, pn, m):
    per_q = []
    for a, b, mr in zip(pp.tolist(), pn.tolist(), m.tolist()):
        idx = [i for i, r in enumerate(mr) if r]
        per_q.append(sum((a[i] + b[i] - 1) ** 2 + min(a[i], b[i]) ** 2 for i in idx) if idx else None)
    return ref_mean(per_q)


def ref_intra(pp, pn, m, g):
    per_q = []
    for q in range(pp.shape[0]):
        groups = ref_groups(m[q], g[q])
        tot = 0.0
        for members in groups.values():
            for i in members:
                for j in members:
                    tot += (pp[q, i].item() - pp[q, j].item()) ** 2 + (pn[q, i].item() - pn[q, j].item()) ** 2
        per_q.append(tot if groups else None)
    return ref_mean(per_q)


def ref_rep_probs(pp, m, g, index):
    out = []
    for q in range(pp.shape[0]):
        groups = ref_groups(m[q], g[q])
        out.append([pp[q, index[q, k]].item() for k in sorted(groups)] if groups else None)
    return out


def ref_over_questions(rep_probs, per_question):
    """Mean of `per_question(representative probs)` over the questions that have any."""
    return ref_mean([None if ps is None else per_question(ps) for ps in rep_probs])


def ref_inter(rep_probs):
    def one(ps):
        s = sum(ps)
        return (s - 1) ** 2 - sum(p / s * math.log(p / s) for p in ps if p > 0)
    return ref_over_questions(rep_probs, one)


def ref_inter_raw(rep_probs):
    def one(ps):
        return (sum(ps) - 1) ** 2 - sum(p * math.log2(p) for p in ps if p > 0) / len(ps)
    return ref_over_questions(rep_probs, one)


def ref_inter_logic(rep_probs):
    def one(ps):
        p_one = 0.0
        for k, pk in enumerate(ps):
            prod = pk
            for j, pj in enumerate(ps):
                if j != k:
                    prod *= 1 - pj
            p_one += prod
        return -math.log(p_one + L.EPS)
    return ref_over_questions(rep_probs, one)


def ref_balance(pp, m, g, index, ids, min_questions):
    """Per answer string: over the questions holding it, mean chosen share minus mean 1/G, squared."""
    chosen, chance, count = {}, {}, {}
    for q in range(pp.shape[0]):
        groups = ref_groups(m[q], g[q])
        total = sum(pp[q, index[q, k]].item() for k in groups)
        for k in groups:
            answer = ids[q, groups[k][0]].item()
            if answer < 0:
                continue
            chosen[answer] = chosen.get(answer, 0.0) + pp[q, index[q, k]].item() / (total + L.EPS)
            chance[answer] = chance.get(answer, 0.0) + 1 / len(groups)
            count[answer] = count.get(answer, 0) + 1
    kept = [((chosen[a] - chance[a]) / count[a]) ** 2 for a in count if count[a] >= min_questions]
    return sum(kept) / len(kept) if kept else 0.0


def ref_supervised(pp, pn, m, y):
    per_q = []
    for q in range(pp.shape[0]):
        idx = [i for i in range(pp.shape[1]) if m[q, i]]
        per_q.append(sum(-(y[q, i].item() * math.log(pp[q, i].item()) + (1 - y[q, i].item()) * math.log(1 - pp[q, i].item()))
                         - ((1 - y[q, i].item()) * math.log(pn[q, i].item()) + y[q, i].item() * math.log(1 - pn[q, i].item()))
                         for i in idx) if idx else None)
    return ref_mean(per_q)


def vectorised_and_loop(pp, pn, m, g, y, seed):
    """Each loss's (name, float32 value, float_bounds' bound, float64 loop value); the draws share `seed`."""
    index, _ = L.sample_representatives(g, m, torch.Generator().manual_seed(seed))
    reps = ref_rep_probs(pp, m, g, index)
    ids = torch.where(g % 4 == 0, -1, g)  # group id k is answer string k in every question; every fourth: no answer
    draw = lambda: torch.Generator().manual_seed(seed)  # noqa: E731  the same draw as `index`
    q, n = pp.shape  # sums: N branches (N^2 pairs for intra) per question, Q questions
    checks = [("nega", lambda pp, pn: L.negation_loss(pp, pn, m), ref_nega(pp, pn, m), n),
              ("intra", lambda pp, pn: L.intra_group_loss(pp, pn, m, g), ref_intra(pp, pn, m, g), n * n),
              ("supervised", lambda pp, pn: L.supervised_loss(pp, pn, m, y), ref_supervised(pp, pn, m, y), n),
              ("inter", lambda pp, pn: L.inter_group_loss(pp, m, g, draw()), ref_inter(reps), n),
              ("inter_logic", lambda pp, pn: V.inter_logic_loss(pp, m, g, draw()), ref_inter_logic(reps), n * n),
              ("inter_raw", lambda pp, pn: V.inter_raw_loss(pp, m, g, draw()), ref_inter_raw(reps), n),
              ("balance", lambda pp, pn: V.balance_loss(pp, m, g, ids, draw(), min_questions=2),
               ref_balance(pp, m, g, index, ids, 2), q * n)]
    return [(name, *float32_and_bound(fn, pp, pn, terms=DEPTH + q + length), ref) for name, fn, ref, length in checks]


@pytest.mark.parametrize("seed", range(5))
def test_matches_loop_reference(seed):
    """Every loss in float32 against its float64 loop within what float32 rounding can move it (float_bounds)."""
    for name, value, bound, ref in vectorised_and_loop(*ragged_batch(seed), seed):
        assert value == pytest.approx(ref, abs=bound), name


def test_the_loss_bound_fails_a_planted_error():
    """A planted error of 4 bounds on each loss fails, and the bounds sit far below a relative 1e-4 of the loss."""
    for name, value, bound, ref in vectorised_and_loop(*ragged_batch(0), 0):
        assert abs(value - ref) <= bound < 1e-4 * abs(ref), name
        assert value + 4 * bound != pytest.approx(ref, abs=bound), name


def test_representatives_are_real_members_and_uniform():
    pp, pn, m, g, y = ragged_batch(11)
    gen = torch.Generator().manual_seed(0)
    counts = {}
    for _ in range(400):
        index, exists = L.sample_representatives(g, m, gen)
        for q in range(g.shape[0]):
            groups = ref_groups(m[q], g[q])
            assert sorted(groups) == exists[q].nonzero().flatten().tolist()
            for k, members in groups.items():
                assert index[q, k].item() in members
                counts[(q, k, index[q, k].item())] = counts.get((q, k, index[q, k].item()), 0) + 1
    # every member of a group of size s is picked about 400/s times
    for q in range(g.shape[0]):
        for k, members in ref_groups(m[q], g[q]).items():
            for i in members:
                assert abs(counts.get((q, k, i), 0) - 400 / len(members)) < 0.35 * 400 / len(members) + 15


def test_nan_on_padding_is_ignored():
    pp, pn, m, g, y = ragged_batch(4)
    clean, _ = S.total_loss(pp, pn, m, g, "nega+intra+inter+inter_raw+inter_logic+supervised",
                            torch.Generator().manual_seed(0), labels=y)
    nan = lambda x: x.masked_fill(~m, math.nan)  # noqa: E731
    dirty, _ = S.total_loss(nan(pp), nan(pn), m, g, "nega+intra+inter+inter_raw+inter_logic+supervised",
                            torch.Generator().manual_seed(0), labels=nan(y))
    assert torch.equal(clean, dirty)


def test_gradients_finite_at_saturation():
    pp = t([[1.0, 0.0, 0.0, 1.0]]).requires_grad_()
    pn = t([[0.0, 1.0, 1.0, 0.0]]).requires_grad_()
    m = torch.ones(1, 4, dtype=torch.bool)
    g = torch.tensor([[0, 1, 2, 2]])
    total, terms = S.total_loss(pp, pn, m, g, "nega+intra+inter+inter_raw+inter_logic+supervised",
                                torch.Generator().manual_seed(0), labels=t([[1, 0, 0, 1]]))
    total.backward()
    assert torch.isfinite(total) and torch.isfinite(pp.grad).all() and torch.isfinite(pn.grad).all()


# ---------------------------------------------------------------- degenerate vs consistent solutions

GROUPS6 = [0, 0, 0, 1, 1, 2]


@pytest.mark.parametrize("spec", ["nega+intra+inter", "nega+intra+inter_raw", "nega+intra+inter_logic"])
def test_degenerate_solutions_cost_more_than_consistent(spec):
    """groups [0,0,0,1,1,2], group 1 true.  Consistent: p+ = .99 on group 1, .01 elsewhere, p- = 1 - p+
    -> nega = 6*0.01^2, intra 0, inter = 0.01^2 + H([.0099,.9802,.0099]) ~ 0.11.
    All 0.5 -> nega = 6*0.25 = 1.5, inter = 0.25 + ln 3.  p+ = 1 everywhere (p- = 0 or 1)
    -> inter = (3-1)^2 + ln 3 = 5.10, and nega = 6 if p- = 1."""
    m = torch.ones(1, 6, dtype=torch.bool)
    g = torch.tensor([GROUPS6])
    good = t([[0.01, 0.01, 0.01, 0.99, 0.99, 0.01]])

    def loss(pp, pn):
        return S.total_loss(pp, pn, m, g, spec, torch.Generator().manual_seed(0))[0].item()

    consistent = loss(good, 1 - good)
    assert consistent < 0.2
    half = torch.full((1, 6), 0.5)
    ones = torch.ones(1, 6)
    for pp, pn in [(half, half), (ones, 1 - ones), (ones, ones)]:
        assert loss(pp, pn) > consistent + 1.0


# ---------------------------------------------------------------- spec parsing / total_loss

def test_parse_loss_spec():
    assert S.parse_loss_spec("nega+intra+inter") == {"nega": 1.0, "intra": 1.0, "inter": 1.0}
    assert S.parse_loss_spec(" nega + 0.5*intra + inter_logic") == {"nega": 1.0, "intra": 0.5, "inter_logic": 1.0}
    assert S.parse_loss_spec("2 * supervised") == {"supervised": 2.0}


@pytest.mark.parametrize("bad, needle", [
    ("nega+intre", "'intre'"), ("", "non-empty"), ("nega+", "cannot parse"),
    ("nega+nega", "twice"), ("x*nega", "cannot parse")])
def test_parse_loss_spec_errors(bad, needle):
    with pytest.raises(ValueError, match=needle) as err:
        S.parse_loss_spec(bad)
    if "intre" in bad:
        assert "nega, intra, inter, inter_raw, inter_logic, balance, supervised" in str(err.value)


def test_total_loss_is_weighted_sum_and_shares_representatives():
    pp, pn, m, g, y = ragged_batch(3)
    spec = "nega+0.5*intra+inter+2*inter_logic"
    total, terms = S.total_loss(pp, pn, m, g, spec, torch.Generator().manual_seed(5))
    reps = L.sample_representatives(g, m, torch.Generator().manual_seed(5))
    # the same float32 operations on the same draw: equal
    assert terms["inter"] == L.inter_group_loss(pp, m, g, reps=reps).item()
    assert terms["inter_logic"] == V.inter_logic_loss(pp, m, g, reps=reps).item()
    expected = terms["nega"] + 0.5 * terms["intra"] + terms["inter"] + 2 * terms["inter_logic"]
    # float32's weighted sum of 4 terms against float64's: 4 products and 3 additions, each rounded within u of
    # what it adds up, so at most 7 u of the sum of the |weight * term| (Higham's gamma_7)
    magnitude = sum(abs(w * terms[k]) for k, w in S.parse_loss_spec(spec).items())
    assert total.item() == pytest.approx(expected, abs=7 * U32 * magnitude)
    with pytest.raises(ValueError, match="labels"):
        S.total_loss(pp, pn, m, g, "supervised", None)


def test_curriculum_optimises_inter_first_then_negation_then_everything():
    """Threshold 0.2.  inter 0.60 > 0.2 -> {inter} only (the total is just inter, the reported terms are all);
    inter 0.1, nega 0.5 -> {nega, intra}; both below -> all terms.  Threshold 0 or no inter term -> all."""
    v = lambda **kw: {k: torch.tensor(x) for k, x in kw.items()}  # noqa: E731
    assert S.staged_terms(v(nega=0.5, intra=0.3, inter=0.6), 0.2) == {"inter"}
    assert S.staged_terms(v(nega=0.5, intra=0.3, inter=0.1), 0.2) == {"nega", "intra"}
    assert S.staged_terms(v(nega=0.1, intra=0.3, inter=0.1), 0.2) == {"nega", "intra", "inter"}
    assert S.staged_terms(v(nega=0.5, intra=0.3, inter=0.6), 0.0) == {"nega", "intra", "inter"}
    assert S.staged_terms(v(nega=0.5, intra=0.3), 0.2) == {"nega", "intra"}
    pp, pn, m, g = one_question([0.6, 0.6, 0.2], [0.9, 0.9, 0.9], [0, 0, 1])
    total, terms = S.total_loss(pp, pn, m, g, "nega+intra+inter", torch.Generator().manual_seed(0), curriculum=0.2)
    # test_inter_hand_worked's question (0.602335 there), by the same float32 operations: equal, and the total is it
    assert terms["inter"] == L.inter_group_loss(pp, m, g, torch.Generator().manual_seed(0)).item()
    assert terms["nega"] > 0.2 and total.item() == terms["inter"]
