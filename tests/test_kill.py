"""A real `lm_eval --model lover_hf ... bank=...` run killed with SIGKILL mid-decode and restarted: every question
banked before the kill is read back (none decoded again), none is duplicated, and the final metrics equal those of
an uninterrupted run (issue Nothing lost). benchmarks/reliability/soak_kill.py repeats this at random moments."""

from __future__ import annotations

import glob
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIMIT = 6


def command(bank: Path, out: Path, limit: int = LIMIT) -> list[str]:
    """The embedded SmolLM2, 2 branches of at most 24 tokens, one question per decoding batch."""
    return [sys.executable, "-m", "lm_eval", "--model", "lover_hf", "--model_args",
            f"n_branches=2,bank={bank},feature_cache=none", "--batch_size", "1", "--gen_kwargs", "max_gen_toks=24",
            "--tasks", "lover_gsm8k", "--include_path", str(REPO / "task_configs"), "--limit", str(limit),
            "--output_path", str(out)]


def environment() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def banked_keys(bank: Path, wait: float = 30) -> list[str]:
    """Every record key in a SQLite bank, duplicates included (read-only, while a writer may be running), waiting at
    most `wait` seconds for the writer's lock; [] when the table is not created yet or the lock outlasts `wait`."""
    if not bank.exists():
        return []
    with sqlite3.connect(f"file:{bank}?mode=ro", uri=True, timeout=wait) as db:
        try:
            return [row[0] for row in db.execute("SELECT key FROM records")]
        except sqlite3.OperationalError:  # the table is not created yet, or the writer held its lock past `wait`
            return []


def metrics(out: Path) -> dict:
    (path,) = glob.glob(str(out / "*" / "results_*.json"))
    return json.load(open(path))["results"]["lover_gsm8k"]


def run(bank: Path, out: Path, cwd: Path) -> str:
    done = subprocess.run(command(bank, out), cwd=cwd, env=environment(), capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout + done.stderr


def kill_after(bank: Path, out: Path, cwd: Path, records: int | None = None, seconds: float | None = None) -> bool:
    """Start a run and SIGKILL it once `records` questions are banked (or after `seconds`); False if it ended first."""
    process = subprocess.Popen(command(bank, out), cwd=cwd, env=environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    start = time.monotonic()
    while process.poll() is None:
        if (records is not None and len(banked_keys(bank)) >= records) or \
                (seconds is not None and time.monotonic() - start >= seconds):
            process.send_signal(signal.SIGKILL)
            process.wait()
            return True
        time.sleep(0.05)
    return False


def test_a_killed_run_resumes_from_its_bank_with_identical_metrics(tmp_path, smollm2_dir):
    reference = tmp_path / "reference"
    # The uninterrupted run and the run to kill share nothing: side by side, each mostly waits on one core.
    uninterrupted = subprocess.Popen(command(tmp_path / "reference.sqlite", reference), cwd=tmp_path,
                                     env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    bank = tmp_path / "killed.sqlite"
    killed = kill_after(bank, tmp_path / "killed", tmp_path, records=2)
    _, errors = uninterrupted.communicate(timeout=1200)
    assert uninterrupted.returncode == 0, errors[-4000:]
    assert killed, "the run ended before it could be killed"
    before = banked_keys(bank)
    assert 2 <= len(before) < LIMIT
    log = run(bank, tmp_path / "resumed", tmp_path)
    assert f"{len(before)} of {LIMIT} questions read from the bank" in log, "a banked question was decoded again"
    after = banked_keys(bank)
    assert len(after) == len(set(after)) == LIMIT and set(before) <= set(after)
    assert metrics(tmp_path / "resumed") == metrics(reference)


def test_ctrl_c_says_in_one_line_how_many_questions_are_banked_and_that_the_command_resumes(tmp_path, smollm2_dir):
    """SIGINT (what Ctrl-C sends) once a question is banked: the run ends as an interrupt (status 130, or killed by
    SIGINT), its last line says how many questions the bank holds and where, and no traceback is printed."""
    bank = tmp_path / "bank.sqlite"
    # More questions than the kill test's, so that the signal lands while questions are left to decode even when the
    # bank's read is slow (a read can wait on the writer's lock): with 6, one quiet suite run's signal came only after
    # all six were banked, and the run ended normally.
    limit = 4 * LIMIT
    process = subprocess.Popen(command(bank, tmp_path / "out", limit), cwd=tmp_path, env=environment(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # Polled without waiting on the writer's lock: a read that waited up to 30 s saw the first key only once the
    # run was ending, and the signal then landed in its shutdown (exit 0, all 24 banked, in one suite run).
    while process.poll() is None and not banked_keys(bank, wait=0.2):
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be interrupted"
    process.send_signal(signal.SIGINT)
    _, errors = process.communicate(timeout=600)
    banked = len(banked_keys(bank))
    assert 1 <= banked < limit and process.returncode in (130, -signal.SIGINT), (process.returncode, errors[-3000:])
    lines = [line.strip() for line in errors.replace("\r", "\n").splitlines() if line.strip()]
    assert lines[-1] == (f"lover_hf: interrupted: {banked} questions are banked in {bank}; run the same command to "
                         "resume (banked questions are read back, not decoded again)"), errors[-3000:]
    assert "Traceback" not in errors, errors[-3000:]
