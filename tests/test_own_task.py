"""The README's "Bring your own task" YAML, as written, on a small local JSON-lines file of numeric answers given in
forms exact_match would miss ("51.0", "$1,200"): lm_eval runs it and every row is scored by `lover_match`."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

from tests.conftest import REPO

QUESTIONS = [{"question": "Tom has 50 apples and finds 1 more. How many apples?", "answer": "51.0"},
             {"question": "A bike costs $1,000 and a helmet $200. What do both cost?", "answer": "$1,200"}]


def readme_yaml() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("### Bring your own task"):]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_the_readme_own_task_yaml_runs_as_written(tmp_path, tiny_model_dir):
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "my_arith.yaml").write_text(readme_yaml())
    (tmp_path / "my_arith.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    done = subprocess.run([sys.executable, "-m", "lm_eval", "--model", "lover_hf", "--model_args",
                           f"pretrained={tiny_model_dir},n_branches=2", "--gen_kwargs", "max_gen_toks=4", "--tasks",
                           "my_arith", "--include_path", str(folder), "--output_path", str(tmp_path / "out")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    (results_file,) = glob.glob(str(tmp_path / "out" / "*" / "results_*.json"))
    metrics = json.load(open(results_file))["results"]["my_arith"]
    rows = {key.split(",")[1] for key in metrics if key.startswith("lover_match,")}
    assert rows == {"greedy", "majority", "cot_sum", "lover_sum", "pass_at_n"}


def test_lover_match_compares_in_the_extractors_normal_form():
    """51.0 / $1,200 / "Yes." are the gold sides a user's dataset gives; the picks are lover_select's normal forms."""
    from lover_lmeval.harness.metric import lover_match

    assert lover_match(["51.0"], ["51"]) == {"lover_match": 1.0}
    assert lover_match(["$1,200"], ["1200"]) == {"lover_match": 1.0}
    assert lover_match(["51"], ["52"]) == {"lover_match": 0.0}
    assert lover_match(["Yes."], ["yes"], extract="yes_no") == {"lover_match": 1.0}
    assert lover_match(["no answer here"], ["no answer here"]) == {"lover_match": 1.0}  # unreadable gold: as text
