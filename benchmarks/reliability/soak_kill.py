#!/usr/bin/env python
"""Kill soak (issue Nothing lost): SIGKILL a real `lm_eval --model lover_hf ... bank=...` run at random moments,
restart it, and count what a kill cost.

Each trial starts the run of tests/test_kill.py (embedded SmolLM2, lover_gsm8k --limit 6, 2 branches, one question
per decoding batch) on a fresh bank, kills it after a delay drawn uniformly over 1.1x an uninterrupted run's wall
time (so kills land in model loading, decoding, bank writes, the fit and output writing alike), restarts it to the
end, and checks: every question banked before the kill is read back, not decoded again (lost); no key is stored
twice (duplicated); the final metrics equal the uninterrupted run's (mismatched). Banks alternate between SQLite
and gzip. A trial whose run ended before its kill counts as a trial, not a kill; trials go on until --kills kills.

    LOVER_DATA_DIR=../shared/data .venv/bin/python -m benchmarks.reliability.soak_kill --kills 50 \
        --out benchmarks/results/soak/soak_kill.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from lover_lmeval.core.store.bank_store import open_store

from tests.test_kill import LIMIT, kill_after, metrics, run


def keys(bank: Path) -> list[str]:
    """Every stored key, duplicates included."""
    if not bank.exists():
        return []
    return [record["key"] for record in open_store(bank).records()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="lover-soak-"))
    begin = time.monotonic()
    run(folder / "reference.sqlite", folder / "reference", folder)
    wall = time.monotonic() - begin
    reference = metrics(folder / "reference")
    trials, counts = [], {"kills": 0, "lost": 0, "duplicated": 0, "mismatched": 0}
    while counts["kills"] < args.kills:
        index = len(trials)
        bank = folder / f"trial{index}.{'sqlite' if index % 2 == 0 else 'jsonl.gz'}"
        delay = rng.uniform(0, 1.1 * wall)
        killed = kill_after(bank, folder / f"killed{index}", folder, seconds=delay)
        before = keys(bank)
        log = run(bank, folder / f"resumed{index}", folder)
        after = keys(bank)
        trial = {"bank": bank.suffix, "delay_s": round(delay, 2), "killed": killed, "banked_at_kill": len(before),
                 "read_back": f"{len(set(before))} of {LIMIT} questions read from the bank" in log,
                 "duplicated": len(after) - len(set(after)),
                 "complete": set(before) <= set(after) and len(set(after)) == LIMIT,
                 "metrics_equal": metrics(folder / f"resumed{index}") == reference}
        trials.append(trial)
        counts["kills"] += killed
        counts["lost"] += not (trial["read_back"] and trial["complete"])
        counts["duplicated"] += trial["duplicated"] > 0
        counts["mismatched"] += not trial["metrics_equal"]
        print(json.dumps({"trial": index, **trial}), flush=True)
    report = {"command": " ".join(sys.argv), "uninterrupted_wall_s": round(wall, 1), "trials": len(trials),
              **counts, "per_trial": trials}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "per_trial"}))
    return 0 if counts["lost"] == counts["duplicated"] == counts["mismatched"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
