"""Golden run: `lover train` and `lover compare` on a small committed bank give the numbers they gave before.

The bank (tests/data/golden/smollm2_bank.jsonl.gz) holds the first 8 banked questions of lover_gsm8k and of
lover_bbh_web_of_lies decoded by the embedded SmolLM2 (chat template, N = 10). Both commands run with
`bank_only=true` through the installed `lover` entry point, so nothing is decoded and every stage after decoding
runs for real: features from tokens, the test-time fit, a trained checkpoint, selection rows, diagnostics, the
cross-fit, accuracy vs N and the per-branch log. `expected.json` was written by the code before the package
layout changed (issue Layout); every later change that moves numbers must regenerate it on purpose:

    LOVER_WRITE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from safetensors import safe_open

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "data" / "golden"
BANK = GOLDEN / "smollm2_bank.jsonl.gz"
TASKS = "lover_gsm8k,lover_bbh_web_of_lies"


def _lover(*args: str, cwd: Path) -> None:
    lover = Path(sys.executable).with_name("lover")
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([str(lover), *args], cwd=cwd, env=environment, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]


def _tensor_digests(path: Path) -> dict[str, str]:
    with safe_open(str(path), framework="pt") as f:
        return {k: hashlib.sha256(f.get_tensor(k).numpy().tobytes()).hexdigest() for k in sorted(f.keys())}


def golden_run(tmp_path: Path) -> dict:
    """Everything the two commands produce that a refactor must not change (paths and timings removed)."""
    ckpt = tmp_path / "gsm8k.safetensors"
    args = f"bank={BANK},bank_only=true,feature_cache=none"
    _lover("train", "--model_args", args, "--task", "lover_gsm8k", "--split", "test", "--limit", "8",
           "--apply_chat_template", "--include_path", str(REPO / "task_configs"), "--out", str(ckpt), cwd=tmp_path)
    out = tmp_path / "compare"
    _lover("compare", "--model_args", args, "--tasks", TASKS, "--limit", "8", "--apply_chat_template",
           "--include_path", str(REPO / "task_configs"), "--n_boot", "200", "--verifiers", f"trained={ckpt}",
           "--out", str(out), cwd=tmp_path)
    leaderboard = json.loads((out / "leaderboard.json").read_text())
    leaderboard.pop("model_args")  # holds this run's temporary paths
    metadata = json.loads(ckpt.with_suffix(".json").read_text())
    return {
        "leaderboard": leaderboard,
        "per_question": (out / "per_question.jsonl").read_text().splitlines(),
        "branches": (out / "branches.jsonl").read_text().splitlines(),
        "checkpoint_metadata": metadata,
        "checkpoint_tensors": _tensor_digests(ckpt),
    }


def test_golden_run_is_unchanged(tmp_path):
    got = json.loads(json.dumps(golden_run(tmp_path)))
    expected_path = GOLDEN / "expected.json"
    if os.environ.get("LOVER_WRITE_GOLDEN"):
        expected_path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    expected = json.loads(expected_path.read_text())
    for key in expected:  # one assertion per part, so a failure says which part moved
        assert got[key] == expected[key], key
