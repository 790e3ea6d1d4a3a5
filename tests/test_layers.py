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


#: The names the package's components go by where another module holds them: the lm-eval models, the pipeline, its
#: engines, the copy that reads, the store's parts.
COMPONENTS = {"lm", "pipeline", "pipe", "engine", "vllm_engine", "inner", "phases", "model", "hf_model", "llm",
              "store", "feature_cache", "bank"}


def _attribute_chain(node: ast.expr) -> list[str]:
    """`a.b.c` -> ["a", "b", "c"] (the names of an attribute's owner, root first)."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return names[::-1]


def components_set_from_outside(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, target) of every assignment or setattr in `tree` to an attribute of a component the function did not
    build: its owner reached through a parameter, a global or another object (`pipeline.model = ...`,
    `self.vllm_engine.name += ...`, `lm.staged_keys = ...`), not `self.x` nor an object built in the same function."""
    found = []
    functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for function in functions:
        built = {target.id for node in ast.walk(function) if isinstance(node, (ast.Assign, ast.With, ast.For))
                 for target in ast.walk(node) if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store)}
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            owners = [(t.value, ast.unparse(t)) for target in targets for t in ast.walk(target)
                      if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store)]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                owners.append((node.args[0], f"setattr({ast.unparse(node.args[0])}, ...)"))
            for owner, text in owners:
                chain = _attribute_chain(owner)
                if chain in (["self"], ["cls"]) or (len(chain) == 1 and chain[0] in built):
                    continue
                if COMPONENTS & set(chain):
                    found.append((node.lineno, text))
    return sorted(set(found))


def test_no_module_sets_another_components_attributes():
    """A component changes its state through its own methods (`Pipeline.read_with`, `LoverVLLM.free_engine`), never
    by another module's assignment: lover_vllm's phases once set the pipeline's model, engine and feature-cache salt
    and the lm-eval model's attributes from free functions. The check finds such an assignment where one is planted."""
    package = REPO / "lover_lmeval"
    found = {f"{path.relative_to(package)}:{line}: {text}" for path in sorted(package.rglob("*.py"))
             for line, text in components_set_from_outside(ast.parse(path.read_text(encoding="utf-8")))}
    assert not found, sorted(found)
    planted = ast.parse("def swap(pipeline, model):\n    pipeline.model = model\n\n"
                        "class A:\n    def rename(self):\n        self.vllm_engine.name += '+lora'\n")
    assert components_set_from_outside(planted) == [(2, "pipeline.model"), (6, "self.vllm_engine.name")]
