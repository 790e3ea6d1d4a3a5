"""The golden run (tests/golden.py: what it runs, which values it compares exactly and within which tolerances) gives
the outcomes it gave before; a planted change of the comparison's inputs is caught."""

from __future__ import annotations

import json
import os

import torch

from golden import GOLDEN, mismatches


def test_golden_run_is_unchanged(golden_baseline):
    got = golden_baseline[0]
    expected_path = GOLDEN / "expected.json"
    if os.environ.get("LOVER_WRITE_GOLDEN"):
        written_with = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
                        "threads": torch.get_num_threads()}
        expected_path.write_text(json.dumps({**got, "written_with": written_with}, indent=1, sort_keys=True) + "\n")
    expected = json.loads(expected_path.read_text())
    written_with = expected.pop("written_with", None)  # provenance, not an output
    moved = mismatches(got, expected)
    assert not moved, (f"{len(moved)} golden values moved (expected.json written with {written_with}, this run: "
                       f"{torch.backends.cpu.get_cpu_capability()} kernels); if on purpose, regenerate with "
                       f"LOVER_WRITE_GOLDEN=1:\n" + "\n".join(moved[:40]))


def test_mismatches_allow_float_noise_and_chaos_and_catch_every_moved_outcome():
    """The comparison on a hand-made golden. Pass: a mean score 0.45 -> 0.49 (< MEAN_SCORE_TOL 0.05), a pooled AUROC
    0.55 -> 0.60 (< RANKED_TOL 0.12), a tensor rms moved by 1e-4 of itself (< TENSOR_TOL), and the chaotic values
    moved anywhere in [0, 1]: a trained score 0.03646 -> 0.15, the Xeon's supervised_cv score 0.38725 -> 0.00162,
    supervised_cv_max's pick right -> wrong and its accuracy 0.375 -> 0.25 (issue 47), the per-question AUROC mean
    0.5 -> 0.35. Fail, each named by its path: a flipped lover pick, a changed answer, a lover score 1.2 (outside
    [0, 1]), a supervised_cv score NaN, an accuracy 0.25 -> 0.25 + 1e-9 (exact), supervised_cv_max's question count
    8 -> 7 (exact), a mean score 0.45 -> 0.52 (> 0.05), a tensor rms moved by 2% of itself (> TENSOR_TOL 1.5%)."""
    expected = {
        "branches": [{"answer": "252", "right": False, "tokens": 231, "confidence": 0.93575, "lover": 0.03646,
                      "trained": 0.03646, "supervised_cv": 0.38725}],
        "per_question": [{"doc_id": 0, "lover_sum": 0, "majority": 1, "supervised_cv_max": 1}],
        "leaderboard": {"tasks": {"t": {
            "rows": {"majority": {"acc": 0.25, "n": 8}, "supervised_cv_max": {"acc": 0.375, "n": 8}},
            "diagnostics": {"lover": {"auroc_pooled": 0.55, "mean_score_correct": 0.45, "auroc_per_question_mean": 0.5},
                            "supervised_cv": {"auroc_pooled": 0.4, "questions": 8}}}}},
        "checkpoint_tensors": {"mlp.0.weight": {"shape": [100, 576], "dtype": "float32", "mean": 0.0, "rms": 0.05}},
    }
    noisy = json.loads(json.dumps(expected))
    noisy["branches"][0].update(trained=0.15, supervised_cv=0.00162)
    noisy["per_question"][0]["supervised_cv_max"] = 0
    task = noisy["leaderboard"]["tasks"]["t"]
    task["rows"]["supervised_cv_max"]["acc"] = 0.25
    task["diagnostics"]["lover"].update(auroc_pooled=0.60, mean_score_correct=0.49, auroc_per_question_mean=0.35)
    task["diagnostics"]["supervised_cv"]["auroc_pooled"] = 0.9
    noisy["checkpoint_tensors"]["mlp.0.weight"]["rms"] = 0.05 * (1 + 1e-4)
    assert mismatches(noisy, expected) == []

    moved = json.loads(json.dumps(noisy))
    moved["per_question"][0]["lover_sum"] = 1
    moved["branches"][0].update(answer="250", lover=1.2, supervised_cv=float("nan"))
    task = moved["leaderboard"]["tasks"]["t"]
    task["rows"]["majority"]["acc"] = 0.25 + 1e-9
    task["rows"]["supervised_cv_max"]["n"] = 7
    task["diagnostics"]["lover"]["mean_score_correct"] = 0.52
    moved["checkpoint_tensors"]["mlp.0.weight"]["rms"] = 0.051
    assert [line.split(":")[0] for line in mismatches(moved, expected)] == [
        "branches/0/answer", "branches/0/lover", "branches/0/supervised_cv", "checkpoint_tensors/mlp.0.weight/rms",
        "leaderboard/tasks/t/diagnostics/lover/mean_score_correct", "leaderboard/tasks/t/rows/majority/acc",
        "leaderboard/tasks/t/rows/supervised_cv_max/n", "per_question/0/lover_sum"]
