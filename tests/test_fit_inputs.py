"""Memory at scale: features stored in the model's half precision, and a fit that streams
questions instead of holding a float32 copy of the whole task; both must give the numbers the dense path gives."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
from float_bounds import U32, U64, reference_fit_tolerance

from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.verify.fit_inputs import dense_chunk, normalization_stats, normalized_inputs, verifier_on
from lover_lmeval.core.results import LoverResult
from lover_lmeval.core.verify.scoring import batch_results
from lover_lmeval.core.verify.verifier import VerifierConfig, fit
from test_verifier import make_world, planted

STREAM = VerifierConfig(max_dense_gib=0)  # every access streamed, one question at a time


def test_stats_hand_worked():
    """Two questions, real branches x+ rows [1, 3], [5, 7] and [9, 11] (x- rows all 0); question 1's second branch
    is padding (value 100, masked). x+: mean (5, 7); centred (-4, -4), (0, 0), (4, 4): mean square 32/3 over
    (x+, x-) pooled with x-'s zeros gives one shared scale sqrt((32/3 * 2 + 0 * 2) / 4) = sqrt(16/3) ("mean").
    Chunked (one question at a time) must give the same."""
    features = torch.zeros(2, 2, 2, 2)  # (Q, N, 2, D)
    features[0, 0, 0], features[0, 1, 0], features[1, 0, 0] = torch.tensor([1., 3.]), torch.tensor([5., 7.]), \
        torch.tensor([9., 11.])
    features[1, 1] = 100.0
    mask = torch.tensor([[True, True], [True, False]])
    for chunk in (None, 1):
        mean, std = normalization_stats(features, mask, "mean", 2, chunk)
        torch.testing.assert_close(mean, torch.tensor([[5., 7.], [0., 0.]]))
        torch.testing.assert_close(std, torch.full((2, 2), (16 / 3) ** 0.5))
        _, std = normalization_stats(features, mask, "meanstd", 2, chunk)  # per dimension: x+ sqrt(32/3), x- 0
        torch.testing.assert_close(std, torch.tensor([[(32 / 3) ** 0.5] * 2, [1e-6] * 2]))


@pytest.mark.parametrize("mode", ["mean", "meanstd", "none"])
def test_streamed_stats_match_a_loop_reference(mode):
    g = torch.Generator().manual_seed(0)
    features = 3 * torch.randn(23, 6, 2, 16, generator=g) + 1  # (Q, N, 2, D)
    mask = torch.rand(23, 6, generator=g) > 0.3
    mask[:, 0] = True
    rows = torch.stack([features[q, n] for q in range(23) for n in range(6) if mask[q, n]]).double()  # (R, 2, D)
    mean = rows.mean(0)
    if mode == "mean":
        std = ((rows - mean) ** 2).mean().sqrt().expand(2, 16)
    elif mode == "meanstd":
        std = ((rows - mean) ** 2).mean(0).sqrt()
    else:
        mean, std = torch.zeros(2, 16, dtype=torch.double), torch.ones(2, 16, dtype=torch.double)
    # The dense path sums the R real rows in float32: the mean within u sqrt(R) of the rows' largest |x|, the mean
    # square within u sqrt(R) of the largest square, so the std within that over 2 std; each rounded to float32 last
    # (u); the chunked paths sum in float64 and only that last rounding is left.
    r = rows.shape[0]
    mean_bound = U32 * (math.sqrt(r) + 1) * float(rows.abs().max())
    std_bound = U32 * (math.sqrt(r) * float(((rows - mean) ** 2).max()) / (2 * float(std.min())) + float(std.max()))
    for chunk in (None, 1, 5):
        got = normalization_stats(features, mask, mode, 16, chunk)
        torch.testing.assert_close(got[0].double(), mean, atol=mean_bound, rtol=0)
        torch.testing.assert_close(got[1].double(), std, atol=std_bound, rtol=0)


def test_dense_chunk_budget():
    features = torch.zeros(10, 4, 2, 8)  # 256 bytes of float32 per question
    assert dense_chunk(features, 1.0) is None
    assert dense_chunk(features, 0) == 1
    assert dense_chunk(features, 1000 / 2**30) == 3  # 1000 bytes hold 3 questions


def test_streamed_fit_matches_the_dense_fit():
    """Same seed, same data, in float64 (fit_inputs.fit_dtype): the streamed fit (one question per chunk) trains the
    same verifier up to float64 rounding of the statistics amplified by the epochs (probabilities and losses are at
    most 1 here: float_bounds.reference_fit_tolerance(1)), and every question's top branch is the same."""
    features, mask, groups, *_ = planted(40, make_world(24), seed=3)
    features = features.double()
    config = VerifierConfig(epochs=5)
    dense = fit(features, mask, groups, config)
    streamed = fit(features, mask, groups, VerifierConfig(epochs=5, max_dense_gib=0))
    bound = reference_fit_tolerance(max(1.0, *(abs(v) for v in dense.final_losses.values())))
    assert dense.final_losses == pytest.approx(streamed.final_losses, rel=0, abs=bound)
    with torch.no_grad():
        a, b = dense.verifier.scores(features), streamed.verifier.scores(features)
        assert a.dtype == torch.float64
        torch.testing.assert_close(a, b, atol=reference_fit_tolerance(1.0), rtol=0)
        assert torch.equal(a.argmax(1), b.argmax(1))
        p_dense = verifier_on(dense.verifier, features)
        streamed.verifier.config = STREAM  # scoring streams too
        p_streamed = verifier_on(streamed.verifier, features)
        torch.testing.assert_close(p_dense[0], p_streamed[0], atol=reference_fit_tolerance(1.0), rtol=0)


def test_normalized_inputs_streamed_equal_dense_values():
    """The same (x - mean) / std whether the statistics were summed at once or a question at a time: in float64 the
    two sums of R rows differ by at most R U64 of the largest |x| (worst case), which moves a normalised value by
    that over the smallest std, plus |x - mean| times the std's change over std^2 (the std's change bounded the
    same way, through its square)."""
    features, mask, *_ = planted(12, make_world(16), seed=5)
    features = features.double()
    mask[3, 7:] = False
    features[3, 7:] = float("nan")  # padding may hold garbage; it is zeroed before normalising
    dense, mean, std = normalized_inputs(features, mask, VerifierConfig())
    streamed, *_ = normalized_inputs(features, mask, STREAM)
    assert streamed.chunk == 1 and dense.chunk is None
    real = features[mask]  # (R, 2, D)
    r, largest, spread = real.shape[0], float(real.abs().max()), float((real - mean).abs().max())
    mean_error = r * U64 * largest
    std_error = r * U64 * (spread ** 2 + 2 * spread * mean_error) / float(std.min())
    bound = (mean_error + spread * std_error / float(std.min())) / float(std.min())
    idx = torch.tensor([3, 0, 11])
    torch.testing.assert_close(dense[idx], streamed[idx], atol=bound, rtol=0)
    assert torch.isfinite(streamed[idx]).all()


def _result(features):
    branches = [Branch(f"The answer is {i}.", [i], [0.5], [(0, 16)], "eos") for i in range(features.shape[0])]
    return LoverResult(branches, features, layer=1, layer_features={3: features})


def test_half_precision_features_are_stored_as_such_and_read_exactly():
    """bf16 hidden states are exact in bf16: kept so, read back as float32 with the same values, pickled (ranks,
    cache) at half the size, stacked by batch_results in bf16, and fit exactly as their float32 copy."""
    features, mask, groups, *_ = planted(8, make_world(512), seed=7)
    half = features.bfloat16()  # (Q, N, 2, D)
    exact = half.float()
    results = [_result(half[q].clone()) for q in range(8)]
    assert results[0].stored_features.dtype == torch.bfloat16
    assert results[0].stored_layer_features[3].dtype == torch.bfloat16
    np.testing.assert_array_equal(results[0].features, exact[0].numpy())
    np.testing.assert_array_equal(results[0].layer_features[3], exact[0].numpy())
    assert results[0].features.dtype == np.float32
    full = [_result(exact[q].clone()) for q in range(8)]
    assert len(pickle.dumps(results)) < 0.6 * len(pickle.dumps(full))
    again = pickle.loads(pickle.dumps(results[0]))
    assert again.stored_features.dtype == torch.bfloat16 and torch.equal(again.stored_features, half[0])
    stacked, *_ = batch_results(results, "number")
    assert stacked.dtype == torch.bfloat16 and torch.equal(stacked.float(), exact)
    a = fit(half, mask, groups, VerifierConfig(epochs=3, max_dense_gib=0))
    b = fit(exact, mask, groups, VerifierConfig(epochs=3, max_dense_gib=0))
    assert a.final_losses == b.final_losses


def test_float32_inputs_stay_float32_and_mixed_results_stack_as_float32():
    features = torch.randn(3, 2, 4)
    as_numpy = _result(features.numpy().astype(np.float64))  # anything else is stored as float32
    assert as_numpy.stored_features.dtype == torch.float32
    mixed, *_ = batch_results([_result(features.bfloat16()), _result(features)], "number")
    assert mixed.dtype == torch.float32


def test_lover_hf_in_bfloat16_keeps_bf16_features_and_fits_them(tiny_model_dir):
    """End to end on a tiny real model in bf16: the results carry bf16 features equal to the float32 view they
    expose, and the test-time fit scores them; streaming the fit (max_dense_gib=0) gives the same picks."""
    from lover_lmeval.harness.model import LoverLM

    contexts = ["Question: 2 + 2?\nAnswer:", "Question: 3 + 4?\nAnswer:", "Question: 5 + 1?\nAnswer:"]
    picks = {}
    for gib in (2, 0):
        lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=3, batch_size=2, dtype="bfloat16",
                     fit_config=f"epochs=3;restarts=1;max_dense_gib={gib}")
        results = lm.run_contexts(contexts, {"until": ["\n\n"], "max_gen_toks": 6})
        assert all(r.stored_features.dtype == torch.bfloat16 for r in results)
        np.testing.assert_array_equal(results[0].features, results[0].stored_features.float().numpy())
        lm.pipeline.fit(results)
        picks[gib] = lm.pipeline.select(results, "lover_sum")
        assert all(np.isfinite(r.scores("lover")).all() for r in results)
    assert picks[2] == picks[0]


def test_a_layer_view_is_stored_alone_not_with_its_whole_tensor():
    """The pipeline slices one layer out of (N, 2, L, D); stored as a view it would keep (and pickle) all L."""
    every_layer = torch.randn(3, 2, 5, 64)  # (N, 2, L, D)
    result = _result(every_layer[:, :, 0])
    assert result.stored_features.untyped_storage().nbytes() == 3 * 2 * 64 * 4
    assert len(pickle.dumps(result)) < 3 * 2 * 5 * 64 * 4  # less than the one (N, 2, L, D) tensor it came from


def test_full_batch_fits_do_not_stream(caplog):
    """Full-batch steps (batch_questions=0, the authors' regime) would rebuild the whole float32 copy every step:
    the fit keeps the dense copy and says why."""
    features, mask, *_ = planted(6, make_world(16), seed=2)
    normalized, *_ = normalized_inputs(features, mask, VerifierConfig(batch_questions=0, max_dense_gib=0))
    assert normalized.chunk is None
    assert "cannot stream" in caplog.text
    assert dense_chunk(torch.zeros(0, 4, 2, 8), 0) is None  # an empty task fits any budget (and does not crash)
