"""Golden run: `lover train` and `lover compare` on a small committed bank give the outcomes they gave before.

The bank (tests/data/golden/smollm2_bank.jsonl.gz) holds the first 8 banked questions of lover_gsm8k and of
lover_bbh_web_of_lies decoded by the embedded SmolLM2 (chat template, N = 10), each branch with its token statistics
(added once by `features.stats_from_tokens` on the same fp32 model, as a rescored bank holds them: the values a run
would otherwise rebuild, at the bank's float16). Both commands run with `bank_only=true` through the installed
`lover` entry point and share one feature cache, as a user's runs on one machine do, so nothing is decoded and every
stage after decoding runs for real: features from tokens, the test-time fit, a trained checkpoint, selection rows,
diagnostics, the cross-fit, accuracy vs N and the per-branch log. A change that moves an outcome, or a float past its
tolerance, must regenerate `expected.json` on purpose (the file records the CPU kernels and torch it was written
with):

    LOVER_WRITE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py

Our machines are not one CPU (AMD EPYC with AVX-512 and avx512_bf16, others with AVX2 only, Intel Xeons with AVX-512
and AMX), and PyTorch picks its float kernels by CPU (`ATEN_CPU_CAPABILITY`), so everything computed from features
rounds differently on each. The verifiers' fits are non-convex: on 8 questions some of them amplify that rounding
into other solutions, not into a slightly other float (issue 47: four supervised_cv scores 0.0016 vs 0.387 on an
Intel Xeon). `test_golden_perturbed.py` reruns this pipeline under perturbations standing in for another CPU and
fails on any value below that moves past its rule. The values therefore fall in three kinds:

- outcomes, compared exactly: every pick the label-free fits and the trained checkpoint make (per_question, the
  accuracy rows and their bootstrap intervals, accuracy vs N, the share of one answer and the gold group's rank),
  answer groups, each branch's answer, correctness, finish reason and token count, the checkpoint's metadata and
  tensor shapes. They come from banked token ids, integers and seeded resampling of 0/1 outcomes, and the picks that
  scores decide stay where their margins are wide, which the perturbation check confirms on every run;
- floats of the verifiers' arithmetic that perturbations move by rounding only, compared within the tolerances
  below: mean scores, pooled AUROC and ECE, the checkpoint's losses and tensors, CoT-decoding confidences;
- chaotic values, whose size is not compared (`CHAOTIC`: the same type, a number in [0, 1]): each branch's score
  under any fitted verifier, every value read from `supervised_cv`'s scores (its picks, rows and score diagnostics:
  a 2-fold cross-fit on 4 questions' labels lands on other solutions, its web_of_lies max row 0.25 or 0.375), and the
  per-question AUROC mean (a handful of questions of a few branch pairs: one near-tie swapped moves it by 1/18).
  Their properties are tested instead: supervised_cv in `test_golden_perturbed.py` (better than chance on its own
  training folds, no label of the held-out fold read), the label-free fit in test_verifier.py, and their aggregates
  here (mean scores, pooled AUROC, picks).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors import safe_open

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "data" / "golden"
BANK = GOLDEN / "smollm2_bank.jsonl.gz"
TASKS = "lover_gsm8k,lover_bbh_web_of_lies"

# Tolerances: the largest difference measured, times 3 to 4. Measured with torch 2.13.0+cpu on an AMD EPYC with
# AVX-512 as the spread of each kind of value over (P) 40 fits of each task's banked features multiplied by
# (1 + 1e-6 noise), in-process as `lover compare` and `lover train` fit them, under native and scalar kernels,
# and (G) the golden run under each of test_golden_perturbed.py's perturbations, next to the earlier measurements
# between kernels: (A) an EPYC with AVX-512 vs one whose VM exposes AVX2 only (expected.json was written there),
# (B) ATEN_CPU_CAPABILITY=avx2 vs =default on the latter.
MEAN_SCORE_TOL = 0.05
"""A lover / trained verifier's mean score on right or wrong branches. Measured 0.012 (P: web_of_lies lover
0.5096 to 0.5211), 6.6e-3 (G), 7.1e-3 (A: one branch's trained score, when these were compared per branch)."""
RANKED_TOL = 0.12
"""Pooled AUROC and ECE of a lover / trained verifier: rank- and bin-based, so a score moving past a near-equal one
of the other class, or across a bin edge, moves them by a step. Measured 0.040 (P: web_of_lies lover AUROC 0.574 to
0.614; ECE 0.032), 0.032 (G), 6.0e-3 (B). An orientation flip (AUROC a -> 1 - a) still moves both tasks' lover AUROC
by more (0.66 -> 0.34, 0.61 -> 0.39)."""
LOSS_TOL = 0.02
"""The checkpoint's final losses (0.01 to 1.2 here). Measured 5.8e-3 (P: the gsm8k fit's inter term), 4.0e-3 (G: its
nega term 0.1738 vs 0.1777 under feature noise), 1.3e-3 (A)."""
TENSOR_TOL = 0.015
"""A checkpoint tensor's mean and root mean square, as a fraction of its expected root mean square. Measured 4.4e-3
(P), 6.2e-4 (G), 1.6e-5 (B)."""
CONFIDENCE_TOL = 1e-5
"""CoT-decoding confidence: float64 numpy over banked margins, so the same on every CPU (equal in A and B); this
is one unit of its 5-decimal rounding, so a value on a rounding edge cannot fail."""
CHAOTIC = "chaotic"
"""The rule of a value whose size a fit reaches chaotically: compared as the same type and a number in [0, 1]."""
RANKED = {"auroc_pooled", "ece"}
MEAN_SCORES = {"mean_score_correct", "mean_score_incorrect"}
SCORE_DIAGNOSTICS = {*RANKED, *MEAN_SCORES, "auroc_per_question_mean", "gold_group_top_scored", "top_pick_share"}
"""The diagnostics read from a verifier's scores; the others (branch accuracy, groups, gold among answers) are not."""
BRANCH_OUTCOMES = {"task", "doc_id", "branch", "answer", "right", "finish", "tokens"}


def _lover(*args: str, cwd: Path, env: dict[str, str]) -> None:
    lover = Path(sys.executable).with_name("lover")
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env}
    done = subprocess.run([str(lover), *args], cwd=cwd, env=environment, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]


def _tensor_summaries(path: Path) -> dict[str, dict]:
    """Shape, mean and root mean square of each checkpoint tensor (float64), compared instead of their bytes."""
    out = {}
    with safe_open(str(path), framework="pt") as f:
        for key in sorted(f.keys()):
            tensor = f.get_tensor(key)
            values = tensor.double()
            out[key] = {"shape": list(tensor.shape), "dtype": str(tensor.dtype).removeprefix("torch."),
                        "mean": values.mean().item() if values.numel() else 0.0,
                        "rms": values.square().mean().sqrt().item() if values.numel() else 0.0}
    return out


def golden_run(tmp_path: Path, env: dict[str, str] | None = None, features: Path | None = None) -> dict:
    """Everything the two commands produce that a refactor must not change (paths, timings and digests of float
    bytes removed). `env`: variables the two commands run with on top of this process's (the perturbation check's
    kernels and threads); `features`: a feature cache to read (and fill), else a new one in `tmp_path`."""
    ckpt = tmp_path / "gsm8k.safetensors"
    if features is None:
        features = tmp_path / "features"
        features.mkdir()
    args = f"bank={BANK},bank_only=true,feature_cache={features}"
    _lover("train", "--model_args", args, "--task", "lover_gsm8k", "--split", "test", "--limit", "8",
           "--apply_chat_template", "--include_path", str(REPO / "task_configs"), "--out", str(ckpt), cwd=tmp_path,
           env=env or {})
    out = tmp_path / "compare"
    _lover("compare", "--model_args", args, "--tasks", TASKS, "--limit", "8", "--apply_chat_template",
           "--include_path", str(REPO / "task_configs"), "--n_boot", "200", "--verifiers", f"trained={ckpt}",
           "--out", str(out), cwd=tmp_path, env=env or {})
    leaderboard = json.loads((out / "leaderboard.json").read_text())
    leaderboard.pop("model_args")  # holds this run's temporary paths
    metadata = json.loads(ckpt.with_suffix(".json").read_text())
    metadata.pop("tensors_sha256")  # a digest of float bytes, different on every CPU; the tensors are compared
    return {
        "leaderboard": leaderboard,
        "per_question": [json.loads(line) for line in (out / "per_question.jsonl").read_text().splitlines()],
        "branches": [json.loads(line) for line in (out / "branches.jsonl").read_text().splitlines()],
        "checkpoint_metadata": metadata,
        "checkpoint_tensors": _tensor_summaries(ckpt),
    }


def _rule(path: tuple, expected_parent: dict | None) -> float | str | None:
    """How the value at `path` (keys and list indices from the top) is compared: the allowed |got - expected| of a
    float, CHAOTIC, or None: exactly equal."""
    part, field = path[0], path[-1]
    supervised = any(str(key).startswith("supervised_cv") for key in path)  # its rows are supervised_cv_max, _sum
    if part == "branches":
        if field == "confidence":
            return CONFIDENCE_TOL
        return None if field in BRANCH_OUTCOMES else CHAOTIC  # every other branch field is a verifier's score
    if part == "per_question":
        return CHAOTIC if supervised else None
    if part == "leaderboard" and "rows" in path and supervised:
        return None if field == "n" else CHAOTIC
    if part == "leaderboard" and "diagnostics" in path and field in SCORE_DIAGNOSTICS:
        if supervised or field == "auroc_per_question_mean":
            return CHAOTIC
        return RANKED_TOL if field in RANKED else MEAN_SCORE_TOL if field in MEAN_SCORES else None
    if part == "checkpoint_metadata" and "final_losses" in path:
        return LOSS_TOL
    if part == "checkpoint_tensors" and field in ("mean", "rms"):
        return TENSOR_TOL * expected_parent["rms"] + 1e-12  # a zero tensor stays zero
    return None


def mismatches(got, expected, path: tuple = (), parent: dict | None = None) -> list[str]:
    """Every place `got` differs from `expected` beyond its tolerance, as 'path: got vs expected' lines."""
    where = "/".join(map(str, path)) or "(top)"
    if isinstance(expected, dict) and isinstance(got, dict):
        out = [f"{where}: key {k!r} {'missing' if k in expected else 'new'}" for k in sorted(set(got) ^ set(expected))]
        for key in sorted(set(got) & set(expected)):
            out += mismatches(got[key], expected[key], (*path, key), expected)
        return out
    if isinstance(expected, list) and isinstance(got, list):
        if len(got) != len(expected):
            return [f"{where}: {len(got)} items vs {len(expected)} expected"]
        return [line for i, (g, e) in enumerate(zip(got, expected)) for line in mismatches(g, e, (*path, i), parent)]
    rule = _rule(path, parent) if path else None
    if rule == CHAOTIC:  # its type, and a score, share or 0/1 outcome in [0, 1]: its size is not compared
        number = isinstance(got, (int, float)) and not isinstance(got, bool)
        ok = type(got) is type(expected) and (not number or (math.isfinite(got) and 0 <= got <= 1))
        return [] if ok else [f"{where}: {got!r} vs {expected!r} (chaotic: same type, in [0, 1])"]
    both_floats = all(isinstance(v, float) for v in (got, expected))
    tolerance = rule if both_floats and isinstance(rule, float) else None
    if tolerance is not None:
        ok = math.isfinite(got) and abs(got - expected) <= tolerance
        return [] if ok else [f"{where}: {got!r} vs {expected!r} (tolerance {tolerance:.3g})"]
    if type(got) is not type(expected) or got != expected:  # 1 vs 1.0 or True vs 1 is a changed outcome too
        return [f"{where}: {got!r} vs {expected!r} (exact)"]
    return []
