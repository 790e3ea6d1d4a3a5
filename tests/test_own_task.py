"""The "Bring your own task" YAML of docs/usage.md (the README links it), as written, on a small local JSON-lines file
of numeric answers given in forms exact_match would miss ("51.0", "$1,200"): lm_eval runs it and every row is scored
by `lover_match`."""

from __future__ import annotations

import glob
import json
import re

import pytest

import in_process
from lover_lmeval.harness.sampling_rows import row_names
from tests.conftest import REPO

QUESTIONS = [{"question": "Tom has 50 apples and finds 1 more. How many apples?", "answer": "51.0"},
             {"question": "A bike costs $1,000 and a helmet $200. What do both cost?", "answer": "$1,200"}]


def readme_yaml() -> str:
    """The YAML block of docs/usage.md's "Bring your own task" section, as a user copies it."""
    text = (REPO / "docs" / "usage.md").read_text()
    section = text[text.index("## Bring your own task"):]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readme_own_task_yaml_runs_as_written(tmp_path, tiny_model_dir):
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "my_arith.yaml").write_text(readme_yaml())
    (tmp_path / "my_arith.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    done = in_process.lm_eval(["--model", "lover_hf", "--model_args", f"pretrained={tiny_model_dir},n_branches=2",
                               "--gen_kwargs", "max_gen_toks=4", "--tasks", "my_arith", "--include_path", str(folder),
                               "--output_path", str(tmp_path / "out")], tmp_path)
    (results_file,) = glob.glob(str(tmp_path / "out" / "*" / "results_*.json"))
    metrics = json.load(open(results_file))["results"]["my_arith"]
    rows = {key.split(",")[1] for key in metrics if key.startswith("lover_match,")}
    # its five filters' rows, and the references over the two branches, each branch scored by its lover_match
    assert rows == {"greedy", "majority", "cot_sum", "lover_sum", "pass_at_n", *row_names(2)}
    assert metrics["lover_match,maj@2"] == metrics["lover_match,majority"]
    assert "The table at the end has one lover_match row per selector" in done.stderr  # the task's metric, named


def test_lover_match_compares_in_the_extractors_normal_form():
    """51.0 / $1,200 / "Yes." are the gold sides a user's dataset gives; the picks are lover_select's normal forms."""
    from lover_lmeval.harness.metric import lover_match

    assert lover_match(["51.0"], ["51"]) == {"lover_match": 1.0}
    assert lover_match(["$1,200"], ["1200"]) == {"lover_match": 1.0}
    assert lover_match(["51"], ["52"]) == {"lover_match": 0.0}
    assert lover_match(["Yes."], ["yes"], extract="yes_no") == {"lover_match": 1.0}
    assert lover_match(["no answer here"], ["no answer here"]) == {"lover_match": 1.0}  # unreadable gold: as text


def _own_task(tmp_path, monkeypatch, metric: str = "lover_match"):
    """The documented YAML (its metric swapped for `metric`) and its questions in tmp_path, the working directory."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "my_arith.yaml").write_text(readme_yaml().replace("metric: lover_match", f"metric: {metric}"))
    (tmp_path / "my_arith.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    monkeypatch.chdir(tmp_path)  # the YAML's data_files path is relative to where lm-eval runs
    return folder


def test_lover_compare_reads_the_own_tasks_lover_match(tmp_path, monkeypatch, tiny_model_dir):
    """The documented task is scored by lover_match: `lover compare` used to end, after the whole run, with
    KeyError: 'exact_match'. Now each of the 5 filters is a row over the 2 questions, read from lover_match."""
    from lover_lmeval.apps.cli import main

    folder = _own_task(tmp_path, monkeypatch)
    assert main(["compare", "--model_args", f"pretrained={tiny_model_dir},n_branches=2", "--tasks", "my_arith",
                 "--include_path", str(folder), "--limit", "2", "--gen_kwargs", "max_gen_toks=4", "--n_boot", "50",
                 "--cv_folds", "0", "--out", str(tmp_path / "out")]) == 0
    entry = json.loads((tmp_path / "out" / "leaderboard.json").read_text())["tasks"]["my_arith"]
    assert entry["metric"] == "lover_match"
    assert set(entry["rows"]) == {"greedy", "majority", "cot_sum", "lover_sum", "pass_at_n"}
    assert all(row["n"] == 2 for row in entry["rows"].values())


def test_lover_compare_refuses_a_metric_it_cannot_read(tmp_path, monkeypatch):
    """bleu is no per-question 0/1 score: check_task (what compare() runs on every task before the model loads)
    refuses it in one line naming the task, the metric and the fix. Its task comes from lm-eval's own loader, without
    lm-eval's default tasks: indexing those takes seconds."""
    from lm_eval.tasks import TaskManager

    from lover_lmeval.apps.samples import TaskNotComparable, check_task

    folder = _own_task(tmp_path, monkeypatch, metric="bleu")
    task = TaskManager(include_path=str(folder), include_defaults=False).load(["my_arith"])["tasks"]["my_arith"]
    with pytest.raises(TaskNotComparable) as refusal:
        check_task(task)
    message = str(refusal.value)
    assert "\n" not in message and "'my_arith'" in message and "['bleu']" in message
    assert "metric: lover_match" in message
    (folder / "my_arith.yaml").write_text(readme_yaml())  # as written: lover_match
    task = TaskManager(include_path=str(folder), include_defaults=False).load(["my_arith"])["tasks"]["my_arith"]
    reading = check_task(task)
    assert (reading.extract, reading.metric, reading.gold_extract) == ("number", "lover_match", "number")
    assert (reading.prefix, reading.normalise) == ("", None)  # a lover_select task's rows, its targets as they are


def test_compare_reads_the_gold_answer_as_the_metric_does():
    """lover_match (extract=number) reads "51.0" as 51 and "$1,200" as 1200, a target it cannot read as its text;
    exact_match (no gold extractor) compares the stripped target as text."""
    from lover_lmeval.apps.samples import metric_gold

    assert metric_gold("51.0", "number") == "51" and metric_gold("$1,200", "number") == "1200"
    assert metric_gold(" no answer here ", "number") == "no answer here"
    assert metric_gold(" 51.0 ", None) == "51.0"
