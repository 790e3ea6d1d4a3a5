"""`lover_math500` through lm-eval's command line (in this process) on the embedded SmolLM2: every selector's row
scored by lover_match with math-verify's equivalence, the test-time fit grouping answers with extract=math."""

from __future__ import annotations

import json

import pytest

import in_process
from lover_lmeval.core.select.rows import TASK_ROWS
from lover_lmeval.harness.sampling_rows import row_names


@pytest.mark.slow
def test_lm_eval_cli_runs_lover_math500(tmp_path, smollm2_dir):
    """Two MATH-500 problems, 2 branches of at most 64 tokens each (a 135M model rarely boxes an answer that soon: the
    rows' values are not the point). Every selector's row is a lover_match row; each pick is "" or a branch's stated
    answer in its group's representative (greedy's too: every math answer is marked, so a cut branch keeps it or has
    none); pass_at_n is every row's ceiling; the fit extracted with `math`."""
    out = tmp_path / "out"
    in_process.lm_eval(["--model", "lover_hf", "--model_args", "n_branches=2", "--gen_kwargs", "max_gen_toks=64",
                        "--tasks", "lover_math500", "--limit", "2", "--log_samples", "--output_path", str(out)],
                       tmp_path)
    (results_file,) = out.glob("*/results_*.json")
    results = json.loads(results_file.read_text())
    metrics = results["results"]["lover_math500"]
    rows = {key.split(",")[1]: value for key, value in metrics.items() if key.startswith("lover_match,")}
    sampling = results["config"]["lover"]["sampling_rows"]["lover_math500"]  # references over the 2 branches
    assert set(rows) == set(TASK_ROWS) | set(sampling) and sampling == row_names(2)
    assert all(rows["pass_at_n"] >= rows[row] for row in TASK_ROWS)
    assert rows["pass@2"] == rows["pass_at_n"] and rows["maj@2"] == rows["majority"]  # lover_match on each branch
    assert results["config"]["lover"]["test_time_fits"]["lover_math500"]["extract"] == "math"

    from lover_lmeval.core.decode.branch import Branch
    from lover_lmeval.core.select.answers import stated_answers
    from lover_lmeval.core.select.math_answers import extract_math

    (samples_file,) = out.glob("*/samples_lover_math500_*.jsonl")
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    assert len(samples) == 2 * (len(TASK_ROWS) + len(sampling)) and {s["doc_id"] for s in samples} == {0, 1}
    for sample in samples:
        assert sample["lover_match"] in (0.0, 1.0)
        logged = sample["lover"]
        branches = [Branch(text, [], [], [], finish) for text, finish in zip(logged["texts"], logged["finish"])]
        stated = {a.value for a in stated_answers(extract_math, branches) if a is not None}
        picks = sample["filtered_resps"][0]  # a reference's: each branch's stated answer
        picks = picks if sample["filter"] in sampling else [picks[0] if isinstance(picks, list) else picks]
        assert all(pick == "" or pick in stated for pick in picks), (sample["filter"], picks, stated)  # math has no fallback: greedy too
