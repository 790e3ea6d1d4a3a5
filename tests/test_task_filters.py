"""One list of selection rows (core/select/rows.py): the lover_* tasks' generated filter YAMLs and the registered
strategies agree with it, so a new selector is added in one place."""

from __future__ import annotations

import yaml

from lover_lmeval.core.select.answers import EXTRACTORS
from lover_lmeval.core.select.rows import NO_FILTER, ROWS, TASK_ROWS
from lover_lmeval.core.select.selection import ORACLES, STRATEGIES
from lover_lmeval.harness.autoload import TASK_FOLDER
from lover_lmeval.harness.task_filters import GOLD_FIELD, main, render


def test_the_generated_task_yamls_are_up_to_date(capsys):
    """Edited rows without a rerun of the generator (or a hand-edited base YAML) fail here, naming the command."""
    assert main(["--check"]) == 0, capsys.readouterr().out
    generated = {f"_lover_{extract}.yaml" for extract in EXTRACTORS}
    assert {path.name for path in TASK_FOLDER.glob("_lover_*.yaml")} - {"_lover_base.yaml"} == generated


def test_every_registered_strategy_is_a_row_and_every_task_row_a_strategy():
    """A strategy registered without a row would never be printed; a row the tasks carry no filter for says why
    (`NO_FILTER`); every other row is a strategy, or lm-eval would refuse the filter the generator writes for it."""
    assert len(set(ROWS)) == len(ROWS)
    missing = sorted(set(STRATEGIES) - set(ROWS))
    assert not missing, f"registered strategies {missing}: add them to core/select/rows.py's ROWS"
    assert set(NO_FILTER) <= set(ROWS) and all(reason.strip() for reason in NO_FILTER.values())
    assert set(TASK_ROWS) <= set(STRATEGIES), sorted(set(TASK_ROWS) - set(STRATEGIES))


def test_each_base_yaml_has_one_filter_per_task_row_in_order():
    """What lm-eval reads: one lover_select step per row, named after its strategy, with the file's extractor; only
    oracles name the gold field (a row name YAML would read as a number or a boolean would fail here)."""
    for extract in EXTRACTORS:
        filters = yaml.safe_load(render(extract))["filter_list"]
        assert [entry["name"] for entry in filters] == list(TASK_ROWS)
        for entry in filters:
            expected = {"function": "lover_select", "strategy": entry["name"], "extract": extract}
            if entry["name"] in ORACLES:
                expected["gold"] = GOLD_FIELD
            assert entry["filter"] == [expected]
