"""The GPU run prepared for the next lease (benchmarks/results/gpu_run30, *On the card II*) runs what its plan says.

A lease is 15 minutes once, so a step that silently never runs, or a bank that stays on the card, costs a whole run:
the device side's DEFAULT_STEPS decides which of the job's steps run, and BANKS_BACK which banks come back for the
engines' agreement. Read from the two scripts as the shell would see them, no card needed.
"""

from __future__ import annotations

import re
from pathlib import Path

RUN = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "gpu_run30"


def _device_setting(name: str) -> list[str]:
    match = re.search(rf'^\s*{name}="([^"]*)"', (RUN / "device.sh").read_text(), re.MULTILINE)
    assert match, f"device.sh sets no {name}"
    return match.group(1).split()


def _job_steps() -> dict[str, str]:
    """Each `want NAME && run NAME ...` command of job.sh (its continuation lines joined), by step name."""
    text = (RUN / "job.sh").read_text().replace("\\\n", " ")
    return {m.group(1): m.group(0) for m in re.finditer(r"^want (\w+) && run \1 .*$", text, re.MULTILINE)}


def test_every_default_step_of_the_device_side_is_a_step_of_the_job():
    steps = _job_steps()
    assert [s for s in _device_setting("DEFAULT_STEPS") if s not in steps] == []


def test_the_phases_step_the_plan_adds_runs_by_default_right_after_vllm_cot():
    """Run 30's plan update (session 32): step 1b `vllm_phases`, right after `vllm_cot`, on the same questions."""
    defaults = _device_setting("DEFAULT_STEPS")
    assert defaults[:2] == ["vllm_cot", "vllm_phases"]
    assert list(_job_steps())[:2] == ["vllm_cot", "vllm_phases"]


def test_every_bank_a_default_lover_step_writes_comes_back():
    """A step whose command banks (`bank=$B/PATH`) must name PATH in BANKS_BACK: agreement reads those banks here."""
    back = set(_device_setting("BANKS_BACK"))
    steps = _job_steps()
    written = {s: m.group(1) for s in _device_setting("DEFAULT_STEPS")
               if (m := re.search(r"bank=\$B/([\w./-]+)", steps[s]))}
    assert {"vllm_cot", "vllm_phases", "hf_default", "vllm_sample"} <= set(written)
    assert {s: path for s, path in written.items() if path not in back} == {}
