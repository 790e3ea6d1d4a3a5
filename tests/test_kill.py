"""A real `lm_eval --model lover_hf ... bank=...` run killed with SIGKILL mid-decode and restarted: every question
banked before the kill is read back (none decoded again), none is duplicated, and the final metrics equal those of
an uninterrupted run. benchmarks/reliability/soak_kill.py repeats this at random moments.

Each signal is sent on an event the run reports, not after a sleep or a poll: the run's log line saying its first
decoded question is banked (FIRST_BANKED). The questions left then take seconds each, so the signal lands mid-decode
however fast or loaded the machine is."""

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

import pytest

REPO = Path(__file__).resolve().parents[1]
LIMIT = 6
FIRST_BANKED = "lover: the first decoded question is banked in "
"""The start of the line the store step logs once the first question it decoded is in the bank."""
pytestmark = pytest.mark.slow  # real runs of the embedded LLM


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


def _as_a_terminals_job() -> None:
    """In the run's process before it starts: Ctrl-C's default action, as a command started from a terminal has. A
    process started in the background of a non-interactive shell (`cmd &`, as a CI script may start the suite)
    inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler: the signal would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def signal_once_banked(bank: Path, out: Path, cwd: Path, signal_number: int, limit: int = LIMIT
                       ) -> tuple[subprocess.Popen, str]:
    """Start a run and send it `signal_number` as soon as it logs that its first question is banked; wait for it to
    end. Returns the process and its whole stderr; fails if the run ended without that line."""
    process = subprocess.Popen(command(bank, out, limit), cwd=cwd, env=environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_as_a_terminals_job)
    seen = []
    for line in process.stderr:  # the run's log, a line as it is written
        seen.append(line)
        if FIRST_BANKED in line:
            process.send_signal(signal_number)
            break
    _, rest = process.communicate(timeout=1200)
    errors = "".join(seen) + rest
    assert FIRST_BANKED in errors, "the run ended without banking a question:\n" + errors[-3000:]
    return process, errors


def kill_after(bank: Path, out: Path, cwd: Path, records: int | None = None, seconds: float | None = None) -> bool:
    """Start a run and SIGKILL it once `records` questions are banked (or after `seconds`); False if it ended first.
    The soak's random moments (benchmarks/reliability/soak_kill.py); the tests signal on the run's own event."""
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
    killed, _ = signal_once_banked(bank, tmp_path / "killed", tmp_path, signal.SIGKILL)
    _, errors = uninterrupted.communicate(timeout=1200)
    assert uninterrupted.returncode == 0, errors[-4000:]
    assert killed.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    before = banked_keys(bank)
    assert 1 <= len(before) < LIMIT
    log = run(bank, tmp_path / "resumed", tmp_path)
    assert f"{len(before)} of {LIMIT} questions read from the bank" in log, "a banked question was decoded again"
    after = banked_keys(bank)
    assert len(after) == len(set(after)) == LIMIT and set(before) <= set(after)
    assert metrics(tmp_path / "resumed") == metrics(reference)


def test_ctrl_c_says_in_one_line_how_many_questions_are_banked_and_that_the_command_resumes(tmp_path, smollm2_dir):
    """SIGINT (what Ctrl-C sends) once the run says its first question is banked: the run ends as an interrupt
    (status 130, or killed by SIGINT), its last line says how many questions the bank holds and where, and no
    traceback is printed."""
    bank = tmp_path / "bank.sqlite"
    process, errors = signal_once_banked(bank, tmp_path / "out", tmp_path, signal.SIGINT)
    banked = len(banked_keys(bank))
    assert 1 <= banked < LIMIT and process.returncode in (130, -signal.SIGINT), (process.returncode, errors[-3000:])
    lines = [line.strip() for line in errors.replace("\r", "\n").splitlines() if line.strip()]
    assert lines[-1] == (f"lover_hf: interrupted: {banked} questions are banked in {bank}; run the same command to "
                         "resume (banked questions are read back, not decoded again)"), errors[-3000:]
    assert "Traceback" not in errors, errors[-3000:]
