"""The package's layers are enforced by a tool, not by convention (pyproject's import-linter contracts)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    """apps > harness > data > core; inside core, pipeline > config, results > store, verify > select, decode >
    helpers; the core and data layers import no lm-eval; only harness/vllm/ imports vLLM or Ray (a run of lover_hf
    never needs them); no cycles between siblings."""
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "layers: apps > harness > data > core KEPT" in done.stdout
    assert "core stages import downward only" in done.stdout  # the stage folders of core/ are a contract too
    assert "only harness/vllm/ imports vLLM or Ray KEPT" in done.stdout
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("module, name", [("model.py", "LoverLM"), ("vllm/model.py", "LoverVLLM")])
def test_the_lm_eval_adapters_stay_thin(module, name):
    """LoverLM and LoverVLLM only turn lm-eval requests into prompts and back and start their engines; the pipeline
    lives in the core, lover_vllm's checks, memory plan, HF copy and phases in modules of their own."""
    tree = ast.parse((REPO / "lover_lmeval" / "harness" / module).read_text())
    (adapter,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name]
    assert adapter.end_lineno - adapter.lineno + 1 <= 120


def test_architecture_md_names_every_module():
    """docs/architecture.md gives every module of the package a line, by its path under its layer (`decode/kv.py`,
    `vllm/engine.py`, `view.py`) or under the package (`task_configs/lover_tasks.py`): a module added without one
    fails here."""
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    package = REPO / "lover_lmeval"
    missing = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        parts = path.relative_to(package).parts
        names = {"/".join(parts), "/".join(parts[1:]) if len(parts) > 1 else parts[0]}
        if not any(f"`{name}`" in doc for name in names):
            missing.append("/".join(parts))
    assert not missing, f"docs/architecture.md has no line for {missing}"


def test_every_module_logs_through_the_one_logger_named_for_the_model_that_runs(caplog):
    """No module makes a logger of its own (math_worker.py only quiets math-verify's in its child process), and the
    one logger writes under `lm_eval.<model>`: after `running("lover_vllm")` the pipeline's record is lover_vllm's,
    so lm-eval's command line shows `[lover_vllm:...]` whichever module logged it."""
    import logging

    from lover_lmeval import log as package_log

    own = []
    for path in sorted((REPO / "lover_lmeval").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "getLogger"
                    and path.name not in ("log.py", "math_worker.py")):
                own.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not own, own
    try:
        package_log.running("lover_vllm")
        with caplog.at_level(logging.INFO, logger="lm_eval.lover_vllm"):
            package_log.log.info("%s: a message", package_log.model_name())
        assert [(r.name, r.getMessage()) for r in caplog.records] == [("lm_eval.lover_vllm", "lover_vllm: a message")]
    finally:
        package_log.running("lover_hf")
