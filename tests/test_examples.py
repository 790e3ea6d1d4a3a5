"""The eval-CI example users copy (examples/ci/gate.py): real lm-eval runs on the tiny model, results JSON written,
exit status 0 at or above every floor, 1 below one, 2 for a row that does not exist; `--results` gates a results
JSON written before without evaluating again."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

GATE = REPO / "examples" / "ci" / "gate.py"


def _gate(tmp_path, tiny_model_dir, *floors: str) -> subprocess.CompletedProcess:
    out = tmp_path / "results.json"
    return subprocess.run([sys.executable, str(GATE), "--model_args", f"pretrained={tiny_model_dir},n_branches=2",
                           "--tasks", "lover_gsm8k", "--limit", "2", "--gen_kwargs", "max_gen_toks=4", "--out", str(out),
                           *[arg for floor in floors for arg in ("--floor", floor)]],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)


def _check(results, *floors: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GATE), *(["--results", str(results)] if results else []),
                           *[arg for floor in floors for arg in ("--floor", floor)]],
                          capture_output=True, text=True, timeout=600)


def test_gate_passes_fails_and_names_a_missing_row(tmp_path, tiny_model_dir):
    passing = _gate(tmp_path, tiny_model_dir, "lover_gsm8k:majority=0", "lover_gsm8k:lover_sum=0")
    assert passing.returncode == 0, passing.stderr[-2000:]
    assert "ok    lover_gsm8k:lover_sum" in passing.stdout
    assert "exact_match,lover_sum" in json.loads((tmp_path / "results.json").read_text())["results"]["lover_gsm8k"]
    # the same results, gated again without evaluating (--results): a floor above, then a row that does not exist
    failing = _check(tmp_path / "results.json", "lover_gsm8k:majority=0", "lover_gsm8k:majority=1.01")
    assert failing.returncode == 1 and "BELOW lover_gsm8k:majority" in failing.stdout
    assert "ok    lover_gsm8k:majority = " in failing.stdout
    missing = _check(tmp_path / "results.json", "lover_gsm8k:lover_median=0")
    assert missing.returncode == 2 and "MISSING lover_gsm8k:lover_median" in missing.stdout
    neither = _check(None)
    assert neither.returncode == 2 and "--results FILE" in neither.stderr
