"""benchmarks/performance/bench_long_branches.py: a stage's seconds are read from a real profile by the function that
does its work, and a stage growing faster than its tokens is flagged, explained only where its evidence says so."""

from __future__ import annotations

import cProfile

import pytest

from benchmarks.bench_common import UNTIL
from benchmarks.performance import bench_long_branches as lb


def test_stage_seconds_find_the_cut_in_a_profile(tokenizer, tmp_path):
    """A profile of make_branch alone: its seconds are the cutting stage's, no other stage's; the decode (which
    holds the cut in a real run) is never negative."""
    from lover_lmeval.core.decode.branch import make_branch

    ids = tokenizer.encode("16 - 3 - 4 = 9 eggs, and 9 * 2 = 18 dollars. The answer is 18.") * 20
    profiler = cProfile.Profile()
    profiler.runcall(lambda: [make_branch(tokenizer, ids, [0.5] * len(ids), UNTIL, "length") for _ in range(5)])
    profiler.dump_stats(tmp_path / "cut.prof")
    seconds = lb.stage_seconds(tmp_path / "cut.prof")["seconds"]
    assert seconds["cutting"] > 0
    assert seconds["decode"] == 0
    assert all(seconds[name] == 0 for name in ("features", "banking", "fit", "selection"))


def _report(stage_seconds: list[dict], tokens: list[int]) -> dict:
    return {"runs": [{"budget": b, "tokens": {"tokens": n}, "stages": {"seconds": s}}
                     for b, n, s in zip((256, 2048), tokens, stage_seconds)]}


def _seconds(**given) -> dict:
    names = [s for s, _ in lb.STAGES] + [s for s, _ in lb.FIT_PARTS + lb.KERNELS] + ["other"]
    return {name: given.get(name, 1.0) for name in names}


def test_a_stage_growing_as_its_tokens_squared_is_a_defect():
    """8x the tokens: the cut 64x its seconds (slope 2) is flagged and not explained; the fit, the same seconds
    (slope 0), is not flagged; a decode whose growth is linear once attention is taken out is explained by it."""
    small = _seconds(cutting=0.01, decode=10.0, k_attention=1.0, k_cache_cat=1.0, fit=2.0)
    # decode: 8x for its 8 s of weights' work (64 s), 40x for its 2 s of attention and copies (80 s)
    large = _seconds(cutting=0.64, decode=144.0, k_attention=40.0, k_cache_cat=40.0, fit=2.0)
    rows = {r["stage"]: r for r in lb.records(_report([small, large], [1000, 8000]))}
    assert rows["cutting"]["slope"] == pytest.approx(2.0)
    assert rows["cutting"]["flagged"] and "defect" in rows["cutting"]["diagnosis"]
    assert rows["fit"]["slope"] == pytest.approx(0.0) and not rows["fit"]["flagged"]
    assert rows["decode"]["flagged"] and rows["decode"]["diagnosis"].startswith("attention's quadratic term")
    assert not rows["k_attention"]["flagged"]  # the kernels are parts, never flagged themselves


def test_a_decode_still_superlinear_without_attention_is_a_defect():
    small = _seconds(decode=10.0, k_attention=1.0, k_cache_cat=1.0)
    large = _seconds(decode=640.0, k_attention=8.0, k_cache_cat=8.0)
    rows = {r["stage"]: r for r in lb.records(_report([small, large], [1000, 8000]))}
    assert rows["decode"]["flagged"] and "defect" in rows["decode"]["diagnosis"]
