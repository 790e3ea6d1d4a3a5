"""benchmarks/performance/bench_scaling.py: its slope is the log-log least-squares slope (hand-worked), its trend and
memory measures behave, and its stages run end to end at the tiniest sizes (a few, to stay fast)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.performance import bench_scaling as bs
from benchmarks.performance import scaling_stages as stages


def test_slope_of_quadratic_times_is_two():
    """t = c n^2: log t = log c + 2 log n, so the least-squares line through (log n, log t) has slope 2.0 exactly;
    t = c n gives 1.0, t = c gives 0.0; fewer than 2 timed points give no slope."""
    sizes = [256, 1024, 4096, 32768]
    assert bs.loglog_slope(sizes, [3e-9 * n ** 2 for n in sizes]) == pytest.approx(2.0, abs=1e-9)
    assert bs.loglog_slope(sizes, [5e-6 * n for n in sizes]) == pytest.approx(1.0, abs=1e-9)
    assert bs.loglog_slope(sizes, [0.25] * 4) == pytest.approx(0.0, abs=1e-9)
    # (1, 1), (2, 4), (4, 8): x = 0, ln 2, 2 ln 2; y = 0, 2 ln 2, 3 ln 2 -> slope = cov / var = (3/2) (ln 2)^2 / ...
    # in units of ln 2: x = 0, 1, 2, y = 0, 2, 3; mean x 1, mean y 5/3; sum dx dy = (-1)(-5/3) + 0 + (1)(4/3) = 3,
    # sum dx^2 = 2: slope 1.5
    assert bs.loglog_slope([1, 2, 4], [1, 4, 8]) == pytest.approx(1.5)
    assert bs.loglog_slope([10], [1.0]) is None


def test_slope_within_a_call():
    """Cumulative seconds 0.5 k (linear) over question prefixes k -> 1.0; 0.5 k^2 -> 2.0."""
    assert stages.prefix_slope([(k, 0.5 * k) for k in (10, 20, 40)]) == pytest.approx(1.0)
    assert stages.prefix_slope([(k, 0.5 * k * k) for k in (10, 20, 40)]) == pytest.approx(2.0)
    assert stages.prefix_slope([(10, 1.0)]) is None


def test_trend_predicts_at_least_linearly():
    """(100, 1 s), (200, 4 s): slope 2, so 400 -> 16 s; a flatter stage is still predicted linearly."""
    assert bs.predicted([{"size": 100, "seconds": 1.0}, {"size": 200, "seconds": 4.0}], 400) == pytest.approx(16.0)
    assert bs.predicted([{"size": 100, "seconds": 1.0}, {"size": 200, "seconds": 1.1}], 400) == pytest.approx(2.2)


def test_measure_sees_a_numpy_allocation():
    result = bs.measure(lambda: np.ones(16 * 2**20 // 8).sum(), repeats=2, budget_s=10)  # 16 MiB, pages touched
    assert result["seconds"] > 0 and result["calls"] == 2
    if result["peak_mb"] is not None:  # VmHWM resettable (Linux): numpy's allocation is seen
        assert 12 <= result["peak_mb"] <= 200


def test_synthetic_branches_state_their_answers():
    from lover_lmeval.core.select.answers import get_extractor, stated_answer

    branch = stages.synthetic_branch(np.random.default_rng(0), 12, "18")
    assert len(branch.token_ids) == len(branch.offsets) == len(branch.stats["logprob"]) == 12
    assert branch.offsets[-1][1] == len(branch.text)
    assert stated_answer(get_extractor("number"), branch).value == "18"
    assert stated_answer(get_extractor("number"), stages.synthetic_branch(np.random.default_rng(0), 8, None)) is None


def test_targets_from_hand_made_points():
    """CCS at 100 and 200 questions (0.5 s, 1 s: slope 1) predicts 5 s at 1,000; the fits together over LoVer alone
    is (L + C + P) / L at the sizes all three ran."""

    def stage(name, points):
        seconds = [t for _, t in points]
        return {"name": name, "axis": "questions", "points": [{"size": n, "seconds": t} for n, t in points],
                "slope": bs.loglog_slope([n for n, _ in points], seconds)}

    found = bs.targets({f"{s['name']}/questions": s for s in (
        stage("fit_lover", [(100, 2.0), (200, 4.0)]), stage("fit_ccs", [(100, 0.5), (200, 1.0)]),
        stage("fit_pca", [(100, 0.5)]))})
    ccs = found["ccs_seconds_at_most_1000_questions"]
    assert ccs["at_1000"] == pytest.approx(5.0) and ccs["at_1000_predicted"] and not ccs["met"]
    assert found["fits_together_over_lover"]["by_questions"] == {100: 1.5}
    assert found["fits_together_over_lover"]["met"]


def test_token_stages_run_on_the_real_tokenizer(tokenizer):
    call = stages.cut_stage(lambda: tokenizer, "text")(16, {})
    branch = call()
    assert len(branch.token_ids) == len(branch.offsets) <= 16
    # the one-pass cut decodes the branch, a window of 1-3 ids a token and the branch again: ~3 ids a token
    assert 2 <= call.info["decoded_ids_per_token"] <= bs.BOUNDED_DECODES
    counter = stages.DecodeCounter(tokenizer)
    assert counter.decode([1, 2, 3]) == tokenizer.decode([1, 2, 3]) and counter.counts["ids"] == 3
    counter.backend_tokenizer.decode([4, 5])
    assert counter.counts["ids"] == 5 and len(counter) == len(tokenizer)
    found = stages.stats_stage(lambda: tokenizer)(8, {})()
    assert sorted(found) == sorted(("logprob", "topk_logprob", "entropy", "kl_uniform"))
    assert all(len(values) == 8 for values in found.values())


def test_tiniest_run_writes_its_results(tmp_path):
    out = tmp_path / "scaling.json"
    code = bs.main(["--smoke", "--only", r"bank_write\[sqlite\]|select\[(majority|softsc_min)\]|interval_row",
                    "--out", str(out), "--figure", str(tmp_path / "scaling.png")])
    assert code == 0
    report = json.loads(out.read_text())
    names = {(s["name"], s["axis"]) for s in report["stages"]}
    assert names == {("bank_write[sqlite]", "tokens"), ("select[majority]", "branches"),
                     ("select[softsc_min]", "branches"), ("select[majority]", "questions"),
                     ("select[softsc_min]", "questions"), ("interval_row", "questions")}
    for s in report["stages"]:
        assert [p["size"] for p in s["points"]] == [16, 32] if s["axis"] == "tokens" else len(s["points"]) == 2
        sizes, seconds = [p["size"] for p in s["points"]], [p["seconds"] for p in s["points"]]
        hand = math.log(seconds[1] / seconds[0]) / math.log(sizes[1] / sizes[0])  # two points: the line through them
        assert s["slope"] == pytest.approx(hand, abs=1e-3)
        assert s["flagged"] == (s["slope"] > bs.FLAG_ABOVE)
        if s["name"].startswith("select[") and s["axis"] == "questions":  # each call's own growth, recorded
            assert all(isinstance(p["prefix_slope"], float) for p in s["points"])
    assert report["machine"]["cores"] and "torch" in report["machine"]
    assert "| stage | size axis | sizes | seconds at each | slope | top-3 slope | peak MB |" in \
        out.with_suffix(".md").read_text()
    assert (tmp_path / "scaling.png").stat().st_size > 0
    # re-rendered from its JSON alone: the same slopes and table
    assert bs.main(["--render", str(out), "--out", str(tmp_path / "again.json"), "--figure", ""]) == 0
    again = json.loads((tmp_path / "again.json").read_text())
    assert [s["slope"] for s in again["stages"]] == [s["slope"] for s in report["stages"]]
    assert again["markdown"] == report["markdown"]
