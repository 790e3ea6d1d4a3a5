"""What CI's installs rely on: pip byte-compiles only where Python will not cache bytecode itself (scripts/pip.sh), and
a module compiled on first import under the suite's warnings-as-errors fails for an invalid escape in our code, not in
a third-party file (pyproject.toml's filterwarnings)."""

from __future__ import annotations

import os
import subprocess
import tomllib
import warnings
from pathlib import Path

import pytest
from _pytest.config import parse_warning_filter

REPO = Path(__file__).resolve().parents[1]
INVALID_ESCAPE = 'PERCENT = "\\%"\n'
"""One line as lm-eval's hendrycks_math/utils.py has it: `"\\%"` is not an escape Python knows."""


def compile_under_suite_filters(path: str) -> None:
    """Compile INVALID_ESCAPE as the file `path`, under the suite's warning filters in the order pytest applies them
    (later ones take precedence): how the import of a module that no install compiled runs inside a test."""
    filters = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["filterwarnings"]
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        for spec in filters:
            warnings.filterwarnings(*parse_warning_filter(spec, escape=False))
        compile(INVALID_ESCAPE, path, "exec", dont_inherit=True)


def test_an_invalid_escape_compiles_in_a_third_party_file_and_fails_in_ours():
    compile_under_suite_filters("/venv/lib/python3.11/site-packages/lm_eval/tasks/hendrycks_math/utils.py")
    with pytest.raises(SyntaxError, match="invalid escape sequence"):
        compile_under_suite_filters(str(REPO / "lover_lmeval" / "core" / "select" / "answers.py"))


@pytest.mark.parametrize("dont_write_bytecode, expected", [
    ("1", "-m pip install -q torch==2.13.0"),
    (None, "-m pip install -q --no-compile torch==2.13.0"),
])
def test_pip_compiles_at_install_only_where_python_caches_no_bytecode(dont_write_bytecode, expected):
    """`pip_install PYTHON ARGS` with `echo` as the Python shows the command it runs: with PYTHONDONTWRITEBYTECODE set
    (every process would compile again what pip did not) pip compiles; unset (.ci/run), it leaves that to imports."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    if dont_write_bytecode is not None:
        env["PYTHONDONTWRITEBYTECODE"] = dont_write_bytecode
    done = subprocess.run(["bash", "-c", "source scripts/pip.sh && pip_install echo torch==2.13.0"], cwd=REPO,
                          env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == expected
