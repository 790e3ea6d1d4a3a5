"""A linear probe's restarts trained together (verify/fit_batched.py) against verifier.py's one-at-a-time loop: the
same losses per try, the same trajectories, the same kept try."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from float_bounds import U64, reference_fit_tolerance

from lover_lmeval.core.verify.fit_batched import _per_try_loss, trains_together
from lover_lmeval.core.verify.fit_inputs import normalized_inputs
from lover_lmeval.core.verify.losses import negation_loss
from lover_lmeval.core.verify.probes import ccs_config
from lover_lmeval.core.verify.verifier import (VerifierConfig, fit, seeded_verifier, train_restart,
                                               unsupervised_eval)


def _planted(q: int = 12, n: int = 6, d: int = 32, seed: int = 0):
    """Features with a planted truth direction: x+ - x- points along +e0 for one answer group, -e0 for the other."""
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(q, n, 2, d, generator=g)
    groups = torch.randint(0, 2, (q, n), generator=g)
    features[:, :, 0, 0] += 2.0 * (2 * groups - 1)
    mask = torch.ones(q, n, dtype=torch.bool)
    mask[3, 5] = mask[7, 4] = False  # padding: must not count
    return features, mask, groups


def test_per_try_losses_are_the_registered_term_for_each_try():
    """Hand-worked: one question, one branch, p+ = 0.8, p- = 0.3: nega = (0.8 + 0.3 - 1)^2 + min(0.8, 0.3)^2 = 0.01 +
    0.09 = 0.1; a second try with p+ = p- = 0.5: 0 + 0.25 = 0.25 (float64: five roundings, each within U64 of the
    result). Then against `negation_loss` try by try on random (K=4, Q=3, N=5) probabilities with padding: a mean
    of at most 15 terms of five operations each, both sides rounded, each within 2 x 5 x 15 U64 worst case; the total
    is the term times 2, exact in binary floating point."""
    p_pos = torch.tensor([[[0.8]], [[0.5]]], dtype=torch.float64)
    p_neg = torch.tensor([[[0.3]], [[0.5]]], dtype=torch.float64)
    mask = torch.ones(1, 1, dtype=torch.bool)
    values = _per_try_loss(p_pos, p_neg, {"mask": mask}, {"nega": 1.0})  # (K, T + 1): nega, total
    expected = torch.tensor([[0.1, 0.1], [0.25, 0.25]], dtype=torch.float64)
    assert torch.allclose(values, expected, rtol=5 * U64, atol=0)

    g = torch.Generator().manual_seed(1)
    p_pos = torch.rand(4, 3, 5, generator=g, dtype=torch.float64)
    p_neg = torch.rand(4, 3, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(3, 5, generator=g) > 0.3
    values = _per_try_loss(p_pos, p_neg, {"mask": mask}, {"nega": 2.0})
    for k in range(4):
        assert values[k, 0].item() == pytest.approx(negation_loss(p_pos[k], p_neg[k], mask).item(),
                                                     rel=2 * 5 * 15 * U64, abs=0)
        assert values[k, 1].item() == 2 * values[k, 0].item()


def test_which_fits_train_together():
    """CCS's regime does; an MLP, mini-batches, the representative reduction, a curriculum or labels take the loop."""
    ccs = ccs_config(VerifierConfig())
    assert trains_together(ccs, None, 12)
    assert not trains_together(ccs, torch.ones(12, 6), 12)
    for change in ({"n_hidden_layers": 1}, {"batch_questions": 4}, {"reduction": "representative"},
                   {"curriculum": 0.2, "losses": "nega+inter"}):
        assert not trains_together(replace(ccs, **change), None, 12), change
    assert trains_together(replace(ccs, batch_questions=64), None, 12)  # one batch holds every question


def _one_at_a_time(features, mask, groups, config):
    """verifier.fit's sequential loop, written out: each try trained alone, then the lowest final loss kept."""
    normalized, mean, std = normalized_inputs(features, mask, config)
    seeds = torch.randint(0, 2**62, (config.restarts,), generator=torch.Generator().manual_seed(config.seed)).tolist()
    tries = []
    for rseed in seeds:
        verifier = seeded_verifier(config, rseed, mean, std)
        rows = train_restart(verifier, normalized, mask, groups, None, None, config.losses, config,
                             torch.Generator().manual_seed(rseed + 1))
        final = unsupervised_eval(verifier, normalized, mask, groups, config, None)
        tries.append((verifier, rows, final["total"]))
    return tries


def test_ccs_fit_together_equals_the_tries_one_at_a_time():
    """CCS's regime (10 tries) with 300 epochs on planted features, in float64 (fit_inputs.fit_dtype): every try's
    final loss, its per-epoch history and the kept probe's weights equal the one-at-a-time loop's up to float64
    rounding amplified by the epochs (float_bounds.reference_fit_tolerance), and the same try is kept."""
    features, mask, groups = _planted()
    features = features.double()
    config = replace(ccs_config(VerifierConfig()), epochs=300)
    together = fit(features, mask, groups, config)
    alone = _one_at_a_time(features, mask, groups, config)
    assert together.verifier.mlp[0].weight.dtype == torch.float64
    bound = reference_fit_tolerance(max(1.0, *(abs(total) for _, _, total in alone)))
    assert together.restart_losses == pytest.approx([total for _, _, total in alone], rel=0, abs=bound)
    kept = min(range(len(alone)), key=lambda k: alone[k][2])
    weight = alone[kept][0].mlp[0].weight
    assert torch.allclose(together.verifier.mlp[0].weight, weight, rtol=0,
                          atol=reference_fit_tolerance(float(weight.detach().abs().max())))
    rows = [row for row in together.history if row["restart"] == 3]
    assert [row["nega"] for row in rows] == pytest.approx([row["nega"] for row in alone[3][1]], rel=0, abs=bound)
    assert len(together.history) == config.restarts * config.epochs
    assert set(together.history[0]) == {"restart", "epoch", "nega", "total"}
    assert all(math.isfinite(loss) for loss in together.restart_losses)
