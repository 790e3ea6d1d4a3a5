"""The fit's cheap steps (fit_steps.py) give the probe the straightforward loop gives, with the same seed.

The reference below is the training loop as it was before fit_steps.py (every step: the batch's features in the
epoch's random order through the whole probe, `loss_spec.total_loss` parsing the spec and making the bucket weights,
the per-tensor AdamW). The cheap path differs only in float rounding (other row sets in the matrix products, sums in
another order, the fused AdamW kernel), so after tens of epochs the probes agree to ~1e-6.
"""

from __future__ import annotations

import pytest
import torch
from float_bounds import reference_fit_tolerance

from lover_lmeval.core.verify.fit_inputs import normalized_inputs
from lover_lmeval.core.verify.fit_steps import DrawRows, FitSteps
from lover_lmeval.core.verify.loss_spec import loss_terms, total_loss
from lover_lmeval.core.verify.losses import sample_pairs, sample_representatives
from lover_lmeval.core.verify.losses_authors import question_buckets
from lover_lmeval.core.verify.verifier import Verifier, VerifierConfig, seeded_verifier, train_restart


def reference_restart(verifier, normalized, mask, groups, labels, config, gen) -> list[dict]:
    """The loop before fit_steps.py, verbatim but for the names (answer_ids unused: no balance term here)."""
    opt = torch.optim.AdamW(verifier.parameters(), lr=config.lr, weight_decay=config.weight_decay, foreach=False)
    n_q, history = normalized.shape[0], []

    def draw():
        return {"reps": sample_representatives(groups, mask, gen), "pairs": sample_pairs(groups, mask, gen)}

    draws = draw() if config.resample_every > 1 else None
    for epoch in range(config.epochs):
        if draws is not None and epoch > 0 and (epoch + 1) % config.resample_every == 0:
            draws = draw()
        sums = {}
        for idx in torch.randperm(n_q, generator=gen).split(config.batch_questions or n_q):
            p_pos, p_neg = verifier.head(normalized[idx])
            rows = None if draws is None else {k: tuple(t[idx] for t in v) for k, v in draws.items()}
            loss, terms = total_loss(p_pos, p_neg, mask[idx], groups[idx], config.losses if labels is None else
                                     "supervised", gen, None if labels is None else labels[idx],
                                     curriculum=0.0 if labels is not None else config.curriculum,
                                     reduction=config.reduction, draws=rows)
            opt.zero_grad()
            loss.backward()
            opt.step()
            for k, v in {**terms, "total": float(loss.detach())}.items():
                sums[k] = sums.get(k, 0.0) + v * len(idx) / n_q
        history.append({"epoch": epoch, **sums})
    return history


def _inputs(q=14, n=5, d=24, seed=0):
    """Real-shaped small inputs: LLM-like offsets per view, up to 3 answer groups, a few padded branches; float64,
    so that the fits compared on them run in float64 (fit_inputs.fit_dtype) and differ by float64 rounding alone."""
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(q, n, 2, d, generator=g, dtype=torch.float64) + 3 * torch.randn(
        2, d, generator=g, dtype=torch.float64)  # (Q, N, 2, D)
    groups = torch.randint(0, 3, (q, n), generator=g)
    mask = torch.ones(q, n, dtype=torch.bool)
    mask[::4, -2:] = False  # every fourth question has two padded branches
    return features, mask, groups


@pytest.mark.parametrize("fields, compact", [
    # the authors' regime, shortened: full batch, held draws redrawn before epochs 24 and 49; lr and threshold such
    # that the staged terms pass through all three stages (48, 8 and 4 epochs: inter alone, nega + intra, all)
    (dict(regime="authors", epochs=60, resample_every=25, lr=1e-2, curriculum=0.3), True),
    # our regime: 4-question batches, draws made at every step
    (dict(regime="ours", epochs=6, batch_questions=4), False),
    # full batch with draws made at every step: the random order of the questions stays (it places the draws)
    (dict(regime="ours", epochs=6, batch_questions=0, losses="nega+intra+inter_raw", reduction="representative"),
     False),
])
def test_cheap_steps_give_the_probe_of_the_straightforward_loop(fields, compact):
    features, mask, groups = _inputs()
    regime = fields.pop("regime")
    config = VerifierConfig.from_regime(regime, restarts=1, **fields)
    normalized, mean, std = normalized_inputs(features, mask, config)
    assert FitSteps(normalized, mask, groups, None, None, config.losses, config).compact is compact
    fast, slow = (seeded_verifier(config, 7, mean, std) for _ in range(2))
    fast_history = train_restart(fast, normalized, mask, groups, None, None, config.losses, config,
                                 torch.Generator().manual_seed(8))
    slow_history = reference_restart(slow, normalized, mask, groups, None, config, torch.Generator().manual_seed(8))
    _same_fit(fast, slow, fast_history, slow_history)
    assert len(fast_history) == config.epochs
    moved = seeded_verifier(config, 7, mean, std).state_dict()["mlp.0.weight"]
    assert not torch.allclose(moved, slow.state_dict()["mlp.0.weight"])  # the fit did move the probe


def test_supervised_steps_match_too():
    """Labels take the supervised ceiling's BCE: the same loop, the same probe."""
    features, mask, groups = _inputs(seed=1)
    labels = (groups == 0).float() * mask
    config = VerifierConfig(epochs=5, restarts=1)
    normalized, mean, std = normalized_inputs(features, mask, config)
    fast, slow = (seeded_verifier(config, 3, mean, std) for _ in range(2))
    fast_history = train_restart(fast, normalized, mask, groups, labels, None, "supervised", config,
                                 torch.Generator().manual_seed(4))
    slow_history = reference_restart(slow, normalized, mask, groups, labels, config, torch.Generator().manual_seed(4))
    _same_fit(fast, slow, fast_history, slow_history)


def _fit_gap(fast, slow, fast_history, slow_history) -> tuple[float, float]:
    """(largest weight difference over the weights' magnitude, largest history difference over the losses')."""
    weights = max(float((fast.state_dict()[name] - t).abs().max()) / max(float(t.abs().max()), 1.0)
                  for name, t in slow.state_dict().items())
    history = max(abs(a[k] - b[k]) / max(abs(b[k]), 1.0) for a, b in zip(fast_history, slow_history) for k in b)
    return weights, history


def _same_fit(fast, slow, fast_history, slow_history) -> None:
    """The same probe and the same per-epoch losses, up to float64 rounding amplified by the epochs
    (float_bounds.reference_fit_tolerance, relative to each value's magnitude, at least 1)."""
    assert len(fast_history) == len(slow_history) and all(a.keys() == b.keys()
                                                          for a, b in zip(fast_history, slow_history))
    weights, history = _fit_gap(fast, slow, fast_history, slow_history)
    assert weights <= reference_fit_tolerance(1.0) and history <= reference_fit_tolerance(1.0), (weights, history)


def test_the_reference_fit_bound_fails_a_planted_difference():
    """Planted: the reference loop drawn with another generator (seed 9 instead of 8: other mini-batches and
    representatives) gives a fit whose weights and losses differ by orders of magnitude more than the bound, while
    the same draws stay inside it."""
    features, mask, groups = _inputs()
    config = VerifierConfig.from_regime("ours", restarts=1, epochs=6, batch_questions=4)
    normalized, mean, std = normalized_inputs(features, mask, config)
    fast, slow = (seeded_verifier(config, 7, mean, std) for _ in range(2))
    fast_history = train_restart(fast, normalized, mask, groups, None, None, config.losses, config,
                                 torch.Generator().manual_seed(8))
    slow_history = reference_restart(slow, normalized, mask, groups, None, config, torch.Generator().manual_seed(9))
    weights, history = _fit_gap(fast, slow, fast_history, slow_history)
    assert min(weights, history) > 100 * reference_fit_tolerance(1.0), (weights, history)


def test_draw_rows_read_only_the_drawn_branches():
    """One question, five branches, groups (0, 0, 1, 2, pad). Representatives: branch 1 for group 0, 2 for 1, 3 for 2;
    the pair of group 0 is (0, 1). Feature rows are (branch * 2 + view), view 0 = x+, 1 = x-:
    A = the representatives' x+ = rows 2, 4, 6; B = their x- = rows 3, 5, 7, then branch 0 (a pair's, not a
    representative): its x+ row 0 and x- row 1. The padded branch 4 (rows 8, 9) is never read. Every term equals the
    registered one on the probe's probabilities of the whole tensor."""
    torch.manual_seed(0)
    dense = torch.randn(1, 5, 2, 6)  # (Q, N, 2, D)
    mask = torch.tensor([[True, True, True, True, False]])
    groups = torch.tensor([[0, 0, 1, 2, 0]])
    draws = {"reps": (torch.tensor([[1, 2, 3, 0, 0]]), torch.tensor([[True, True, True, False, False]])),
             "pairs": (torch.tensor([[0, 0, 0, 0, 0]]), torch.tensor([[1, 0, 0, 0, 0]]),
                       torch.tensor([[True, False, False, False, False]]))}
    rows = DrawRows(dense, mask, draws)
    assert rows.a.tolist() == [2, 4, 6] and rows.b.tolist() == [3, 5, 7, 0, 1]
    # cat([p_a, p_b]) = (p+ of 1, 2, 3 | p- of 1, 2, 3 | p+ of 0 | p- of 0): the pair (0, 1) reads 6, 0 and 7, 3
    assert [t.tolist() for t in rows.pairs] == [[6], [0], [7], [3]]
    verifier = Verifier(6, VerifierConfig())
    names = ("nega", "intra", "inter_raw", "inter")
    compact = rows.terms(verifier, names, question_buckets(groups, mask))
    p_pos, p_neg = verifier.head(dense)  # (1, 5) each
    reference = loss_terms(p_pos, p_neg, mask, groups, names, reduction="representative", draws=draws)
    for name in names:
        torch.testing.assert_close(compact[name], reference[name], msg=name)
