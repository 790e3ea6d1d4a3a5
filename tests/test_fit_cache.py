"""A process refits nothing it has fitted already (fit_cache.FITS), and reuses nothing whose inputs differ."""

from __future__ import annotations

import torch

from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.results import LoverResult
from lover_lmeval.core.verify.fit_cache import FITS, FitCache
from lover_lmeval.core.verify.scoring import fit_on_results
from lover_lmeval.core.verify.verifier import VerifierConfig

CONFIG = VerifierConfig.from_regime("authors", restarts=1, epochs=4, hidden=8)


def _results(seed: int = 0, q: int = 6, n: int = 4) -> list[LoverResult]:
    """q questions x n branches answering "q" or "q+1", random features (D = 8)."""
    g = torch.Generator().manual_seed(seed)
    results = []
    for k in range(q):
        texts = [f"The answer is {k + (i % 2)}." for i in range(n)]
        branches = [Branch(t, [0], [0.5], [(0, len(t))], "eos") for t in texts]
        results.append(LoverResult(branches, torch.randn(n, 2, 8, generator=g).numpy()))
    return results


def test_the_same_inputs_are_fitted_once_and_other_inputs_again():
    """Second fit of the same results: a hit, the same scores, a verifier of its own (orienting one leaves the kept
    fit alone). The first 3 of 4 branches, another seed or another config: different inputs, fitted anew."""
    results = _results()
    hits = FITS.hits
    first = fit_on_results(results, "number", CONFIG).verifier
    scores = [r.scores().copy() for r in results]
    first.orientation.fill_(-1.0)
    again = fit_on_results(results, "number", CONFIG).verifier
    assert FITS.hits == hits + 1 and again is not first and float(again.orientation) == 1.0
    assert all((r.scores() == s).all() for r, s in zip(results, scores))
    fewer = [LoverResult(r.branches[:3], r.stored_features[:3]) for r in results]
    fit_on_results(fewer, "number", CONFIG)
    fit_on_results(results, "number", VerifierConfig.from_regime("authors", restarts=1, epochs=4, hidden=8, seed=1))
    fit_on_results(_results(seed=1), "number", CONFIG)
    assert FITS.hits == hits + 1


def test_the_cache_keeps_only_its_last_fits():
    cache = FitCache(size=1)
    features = torch.randn(3, 2, 2, 4)
    mask, groups = torch.ones(3, 2, dtype=torch.bool), torch.tensor([[0, 1], [0, 0], [0, 1]])
    cache.fit(features, mask, groups, CONFIG)
    cache.fit(features + 1, mask, groups, CONFIG)  # pushes the first out
    cache.fit(features, mask, groups, CONFIG)
    assert cache.hits == 0
    cache.fit(features, mask, groups, CONFIG)
    assert cache.hits == 1


def test_accuracy_vs_n_reuses_the_test_time_fit_for_its_last_point():
    """4 branches a question: the curve refits n = 1, 2, 3 and takes n = 4 from the test-time fit (one hit), whose
    lover_sum accuracy it reports."""
    from lover_lmeval.apps.diagnostics import accuracy_vs_n, strategy_correct
    from lover_lmeval.core.select.answers import get_extractor

    results = _results(seed=3)
    gold = [str(k) for k in range(len(results))]
    fit_on_results(results, "number", CONFIG)
    test_time = float(strategy_correct(results, gold, "lover_sum", get_extractor("number")).mean())
    hits = FITS.hits
    curves = accuracy_vs_n(results, gold, get_extractor("number"), "number", CONFIG)
    assert FITS.hits == hits + 1 and curves["n"] == [1, 2, 3, 4]
    assert curves["lover_sum"][-1] == test_time
