"""The eval-CI example users copy (examples/ci/gate.py): a real lm-eval run on the tiny model, results JSON written,
status 0 at or above every floor, 1 below one, 2 for a row that does not exist; `--results` gates a results JSON
written before without evaluating again. The script's `main` runs in this process (its `__main__` block is
`sys.exit(main())`), so its status is `main`'s return value or argparse's SystemExit."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import REPO

GATE = REPO / "examples" / "ci" / "gate.py"


@pytest.fixture(scope="module")
def gate():
    spec = importlib.util.spec_from_file_location("gate", GATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _floors(*floors: str) -> list[str]:
    return [arg for floor in floors for arg in ("--floor", floor)]


@pytest.mark.slow
def test_gate_passes_fails_and_names_a_missing_row(tmp_path, tiny_model_dir, gate, capsys):
    out = tmp_path / "results.json"
    status = gate(["--model_args", f"pretrained={tiny_model_dir},n_branches=2", "--tasks", "lover_gsm8k", "--limit",
                   "2", "--gen_kwargs", "max_gen_toks=4", "--out", str(out),
                   *_floors("lover_gsm8k:majority=0", "lover_gsm8k:lover_sum=0")])
    assert status == 0 and "ok    lover_gsm8k:lover_sum" in capsys.readouterr().out
    assert "exact_match,lover_sum" in json.loads(out.read_text())["results"]["lover_gsm8k"]
    # the same results, gated again without evaluating (--results): a floor above, then a row that does not exist
    status = gate(["--results", str(out), *_floors("lover_gsm8k:majority=0", "lover_gsm8k:majority=1.01")])
    printed = capsys.readouterr().out
    assert status == 1 and "BELOW lover_gsm8k:majority" in printed and "ok    lover_gsm8k:majority = " in printed
    status = gate(["--results", str(out), *_floors("lover_gsm8k:lover_median=0")])
    assert status == 2 and "MISSING lover_gsm8k:lover_median" in capsys.readouterr().out
    with pytest.raises(SystemExit) as neither:
        gate([])
    assert neither.value.code == 2 and "--results FILE" in capsys.readouterr().err
