"""The plain probes fitted beside LoVer (verify/probes.py: CCS and the contrast pairs' first principal direction) and
the label-free warning after every test-time fit (scoring.rank_checks / warn_if_reversed), hand-worked, then through
`Pipeline.fit` on a fit that runs backwards."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from float_bounds import U32, U64, printed_rounding

from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.results import LoverResult
from lover_lmeval.core.verify.probes import PROBES, DirectionProbe, ccs_config, first_direction, fit_probes
from lover_lmeval.core.verify.scoring import REVERSED_BELOW, rank_checks, warn_if_reversed, vote_shares
from lover_lmeval.core.verify.verifier import VerifierConfig


def test_the_first_direction_hand_worked():
    """One question, 4 branches, D = 2, x- = 0 and x+ = (2, 0), (-2, 0), (0, 1), (0, -1) (mean 0): the differences are
    x+ themselves, C = diag((4 + 4) / 4, (1 + 1) / 4) = diag(2, 0.5): d = (1, 0) (largest |d_j| positive). The
    projections 2, -2, 0, 0 have sd sqrt(8 / 4) = 1.41421: z = 1.41421, -1.41421, 0, 0, so p+ = sigmoid(z) =
    0.80443, 0.19557, 0.5, 0.5 = the branch score (p+ + 1 - p-) / 2, with p- = sigmoid(-z)."""
    features = torch.zeros(1, 4, 2, 2)
    features[0, :, 0] = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    mean, d, sd = first_direction(features, mask)
    # the mean of 2, -2, 0, 0 is exactly 0; d and sd from float64 (eigh of a diagonal C), each rounded to float32
    assert torch.equal(mean, torch.zeros(2, 2)) and torch.allclose(d, torch.tensor([1.0, 0.0]), rtol=0, atol=U32)
    assert sd == pytest.approx(2 ** 0.5, rel=U32, abs=0)
    probe = DirectionProbe(mean, d, sd, VerifierConfig())
    p_pos, p_neg = probe(features)
    exact = [1 / (1 + math.exp(-z)) for z in (2 ** 0.5, -(2 ** 0.5), 0.0, 0.0)]
    assert exact == pytest.approx([0.80443, 0.19557, 0.5, 0.5], abs=printed_rounding(5))
    # float32: z from the centring, the product and the division by sd (3 roundings, |z| <= 1.5, sigmoid' <= 1/4),
    # then exp within one ulp, 1 + exp and the reciprocal: at most 4 u of a value <= 1 more
    assert p_pos[0].tolist() == pytest.approx(exact, abs=U32 * (3 * 1.5 / 4 + 4))
    # p+ and p- within that of exact (p- = 1 - p+), then p+ + 1 and - p- each rounded within u of 2; / 2 exact
    assert torch.allclose((p_pos + 1 - p_neg) / 2, p_pos, rtol=0, atol=U32 * (2 * (3 * 1.5 / 4 + 4) + 4) / 2)
    probe.orientation.fill_(-1.0)  # flipped as `orient_by` flips: p+ and p- trade places, score -> 1 - score
    flipped, _ = probe(features)
    # sigmoid(-z) and 1 - sigmoid(z), each within the bound above of the exact value, and the subtraction's rounding
    assert torch.allclose(flipped, 1 - p_pos, rtol=0, atol=2 * U32 * (3 * 1.5 / 4 + 4) + U32)


def test_the_first_direction_matches_a_slow_reference():
    """Against numpy: per-set means over the real branches, the differences' covariance built by a loop over
    branches, its top eigenvector (up to sign, fixed the same way); padding (mask False) is ignored."""
    g = torch.Generator().manual_seed(0)
    features = torch.randn(5, 4, 2, 6, generator=g)
    features[..., 0, 0] += 3 * torch.randn(5, 4, generator=g)  # one dominant direction of the differences
    mask = torch.ones(5, 4, dtype=torch.bool)
    mask[2, 3] = mask[4, 1] = False
    features[2, 3] = 1e3  # padding garbage must not count
    real = [features[q, i].double().numpy() for q in range(5) for i in range(4) if mask[q, i]]
    mean_pos, mean_neg = np.mean([r[0] for r in real], axis=0), np.mean([r[1] for r in real], axis=0)
    cov = np.zeros((6, 6))
    for r in real:
        diff = (r[0] - mean_pos) - (r[1] - mean_neg)
        cov += np.outer(diff, diff) / len(real)
    top = np.linalg.eigh(cov)[1][:, -1]
    top *= np.sign(top[np.abs(top).argmax()])
    _, d, _ = first_direction(features, mask)
    # both in float64 (d rounded to float32 last, within u of a unit vector's entry): the eigenvectors differ by
    # each side's rounding of the covariance's sums over the R real rows (R u64 of its norm) over the gap to the next
    # eigenvalue (Davis-Kahan)
    values = np.linalg.eigvalsh(cov)
    assert np.allclose(d.numpy(), top, rtol=0, atol=U32 + 2 * len(real) * U64 * values[-1] / (values[-1] - values[-2]))


def test_ccs_is_lover_s_fit_reduced_to_burns_et_al_s_probe():
    """regime=ccs: a linear probe (no hidden layer) on the negation loss alone, AdamW lr 1e-3, weight decay 0.01,
    1000 full-batch epochs, 10 tries; the run's orientation rule and seed carry over."""
    config = ccs_config(VerifierConfig(orient="vote", seed=3))
    assert (config.n_hidden_layers, config.losses, config.lr, config.weight_decay, config.epochs,
            config.batch_questions, config.restarts, config.normalize) == (0, "nega", 1e-3, 0.01, 1000, 0, 10, "mean")
    assert (config.orient, config.seed, config.regime) == ("vote", 3, "ccs")


def _results(n_questions: int = 12, seed: int = 2, dim: int = 8) -> list[LoverResult]:
    """test_orientation's 12 questions x 6 branches: answers q (4 branches, CoT confidence 0.5) or q + 1 (2 branches,
    0.1), features random; one token spans each text."""
    g = torch.Generator().manual_seed(seed)
    results = []
    for q in range(n_questions):
        texts = [f"The answer is {q + (i % 3 == 0)}." for i in range(6)]
        branches = [Branch(t, [0], [0.1 if i % 3 == 0 else 0.5], [(0, len(t))], "eos") for i, t in enumerate(texts)]
        results.append(LoverResult(branches, torch.randn(6, 2, dim, generator=g).numpy()))
    return results


def test_fit_probes_stores_both_probes_scores_and_their_records():
    results = _results()
    records = fit_probes(results, "number", VerifierConfig())
    assert list(records) == list(PROBES) == ["ccs", "pca"]
    for result in results:
        for name in PROBES:
            scores = result.scores(name)
            assert scores.shape == (6,) and np.all((0 <= scores) & (scores <= 1))
            assert result.scored_by[name].startswith(f"test-time {name} fit on 12 questions")
    assert records["ccs"]["config"]["regime"] == "ccs" and len(records["pca"]["tensors_sha256"]) == 64
    again = _results()
    fit_probes(again, "number", VerifierConfig())  # deterministic: the same scores from the same inputs
    assert all(np.array_equal(a.scores(n), b.scores(n)) for a, b in zip(results, again) for n in PROBES)


def test_probes_take_lover_s_orientation_rule():
    """With orient=vote each probe is flipped when its scores fall as the vote share rises: afterwards none ranks
    against the vote."""
    results = _results()
    fit_probes(results, "number", VerifierConfig(orient="vote"))
    checks = rank_checks(results, "number", PROBES)
    assert all(checks[name]["vote"] >= 0 for name in PROBES), checks


def _planted(scores_of) -> list[LoverResult]:
    """2 questions x 4 branches: answers 4, 4, 4, 5 and 1, 2, 2, (none); one token spans each text with margin
    (CoT-decoding's confidence) 0.6 for a majority branch, 0.2 otherwise (0 without an answer, as ever). The planted
    "lover" scores are `scores_of(vote share)` per branch."""
    rows = [["4", "4", "4", "5"], ["1", "2", "2", None]]
    shares = vote_shares(rows, 4)
    results = []
    for q, row in enumerate(rows):
        texts = [f"The answer is {a}." if a is not None else "I do not know." for a in row]
        margins = [0.6 if s >= 0.5 else 0.2 for s in shares[q].tolist()]
        branches = [Branch(t, [0], [m], [(0, len(t))], "eos") for t, m in zip(texts, margins)]
        p = np.array([scores_of(float(s)) for s in shares[q]])
        results.append(LoverResult(branches, np.zeros((4, 2, 3), np.float32), {"lover": np.stack([p, 1 - p], -1)}))
    return results


def test_a_planted_reversed_fit_is_named_in_one_log_line(caplog):
    """Shares 0.75, 0.75, 0.75, 0.25 | 0.25, 0.5, 0.5, 0 and CoT confidences 0.6, 0.6, 0.6, 0.2 | 0.2, 0.6, 0.6, 0 (no
    answer: 0). Planted score 1 - share: Spearman -1 with the vote. With the confidence: average ranks (1..8) of the
    score 2, 2, 2, 6.5 | 6.5, 4.5, 4.5, 8, of the confidence 6, 6, 6, 2.5 | 2.5, 6, 6, 1; centred (mean 4.5) they
    multiply to -31.5, norms^2 39 and 31.5: -31.5 / sqrt(39 * 31.5) = -0.8987. Both below -0.3: one line names the fit
    and fit_config=orient=vote. Planted score = share: +1 and +0.8987, nothing said."""
    reversed_fit = _planted(lambda share: 1 - share)
    checks = rank_checks(reversed_fit, "number", ["lover"])
    assert checks["lover"]["vote"] == -1.0  # reversed ranks: -1 exactly, at any number of decimals
    # rank_checks reports 4 decimals
    assert checks["lover"]["confidence"] == pytest.approx(-31.5 / (39 * 31.5) ** 0.5, abs=printed_rounding(4))
    with caplog.at_level("WARNING"):
        assert warn_if_reversed(checks, "my_task", 2) == ["lover"]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "lover fit on 2 questions of my_task ranks against both" in lines[0]
    assert "fit_config=orient=vote" in lines[0]
    caplog.clear()
    checks = rank_checks(_planted(lambda share: share), "number", ["lover"])
    assert checks["lover"]["vote"] == 1.0
    assert checks["lover"]["confidence"] == pytest.approx(31.5 / (39 * 31.5) ** 0.5, abs=printed_rounding(4))
    assert warn_if_reversed(checks, "my_task", 2) == [] and not caplog.records


def test_one_signal_against_the_fit_is_not_enough():
    """Correlations -0.9 with the vote but -0.2 with the confidence (above REVERSED_BELOW = -0.3): no warning."""
    assert REVERSED_BELOW == -0.3
    assert warn_if_reversed({"lover": {"vote": -0.9, "confidence": -0.2}}, None, 5) == []
    assert warn_if_reversed({"lover": {"vote": -0.31, "confidence": -0.31}}, None, 5) == ["lover"]


def test_pipeline_fit_records_the_checks_and_warns_on_a_fit_that_runs_backwards(tiny_model, tokenizer, caplog):
    """test_orientation's seeded features (seed 2): the plain fit (restarts=1, epochs=5, hidden=8) ranks against the
    vote (Spearman -0.33) and, since the CoT confidence here orders branches exactly as the vote, against it too: the
    record holds both correlations and `reversed` names lover, and the log says fit_config=orient=vote. The same fit
    with orient=vote is flipped and named by no warning."""
    from lover_lmeval.core.config import LoverConfig
    from lover_lmeval.core.pipeline import Pipeline

    fit = dict(restarts=1, epochs=5, hidden=8)
    pipe = Pipeline(tiny_model, tokenizer, LoverConfig(fit=VerifierConfig(**fit)))
    with caplog.at_level("WARNING"):
        pipe.fit(_results(), "seeded", "number")
    record = pipe.record.fits["seeded"]
    lover = record["rank_checks"]["lover"]
    # two 4-decimal roundings of one correlation (the planted vote shares and confidences rank alike)
    assert lover["vote"] == pytest.approx(lover["confidence"], abs=2 * printed_rounding(4))
    assert lover["vote"] < REVERSED_BELOW
    assert "lover" in record["rank_checks"]["reversed"] and set(record["probes"]) == set(PROBES)
    assert any("lover fit on 12 questions of seeded" in r.getMessage() and "fit_config=orient=vote" in r.getMessage()
               for r in caplog.records)
    assert pipe.provenance()["test_time_fits"]["seeded"]["rank_checks"] == record["rank_checks"]
    caplog.clear()
    oriented = Pipeline(tiny_model, tokenizer, LoverConfig(fit=VerifierConfig(orient="vote", **fit)))
    oriented.fit(_results(), "seeded", "number")
    checks = oriented.record.fits["seeded"]["rank_checks"]
    # orienting flips the scores: the correlation's sign, each side rounded to 4 decimals
    assert checks["lover"]["vote"] == pytest.approx(-lover["vote"], abs=2 * printed_rounding(4))
    assert checks["reversed"] == []
