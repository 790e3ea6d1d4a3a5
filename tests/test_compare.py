"""`lover compare` on a tiny llama, and its statistics on hand-made outcomes."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lover_lmeval.harness.model import LoverLM
from lover_lmeval.core.verify.checkpoints import save_checkpoint
from lover_lmeval.core.verify.verifier import VerifierConfig, fit
from lover_lmeval.apps.compare import Comparison, compare, interval_rows
from lover_lmeval.apps.samples import tagged_rows
from lover_lmeval.apps.settings import CompareSettings
from lover_lmeval.apps.leaderboard import ROWS, render_markdown
from lover_lmeval.core.stats import bootstrap_interval, paired_bootstrap

REPO = Path(__file__).resolve().parents[1]


def test_bootstrap_statistics_on_hand_made_outcomes():
    rng = np.random.default_rng(0)
    low, high = bootstrap_interval(np.array([1.0] * 8 + [0.0] * 2), 2000, rng)
    assert low < 0.8 < high and 0.4 <= low and high <= 1.0
    assert bootstrap_interval(np.ones(5), 100, rng) == (1.0, 1.0)
    better = paired_bootstrap(np.array([1.0] * 9 + [0.0]), np.array([0.0] * 9 + [1.0]), 2000, rng)
    assert abs(better["diff"] - 0.8) < 1e-12 and better["p_not_better"] < 0.01 and better["low"] > 0


def test_a_rows_interval_does_not_depend_on_the_other_rows():
    """Each interval draws its resamples from the run's seed and its own (task, row) names: adding a row (a new
    selector) or another task leaves every other row's interval as it was; another seed moves it."""
    run = SimpleNamespace(settings=SimpleNamespace(seed=0, n_boot=200))
    run.rng = partial(Comparison.rng, run)
    rng = np.random.default_rng(1)
    table = {name: rng.integers(0, 2, 30).astype(float) for name in ("greedy", "rpc", "lover_sum")}
    alone = interval_rows(run, "lover_gsm8k", {"lover_sum": table["lover_sum"]}, {})["lover_sum"]
    among = interval_rows(run, "lover_gsm8k", table, {})["lover_sum"]
    assert alone == among
    run.settings.seed = 1
    assert interval_rows(run, "lover_gsm8k", table, {})["lover_sum"] != among


def test_compare_writes_a_leaderboard_through_lm_eval(tmp_path, tiny_model_dir):
    identity = LoverLM(pretrained=str(tiny_model_dir), n_branches=3, verifier=None).pipeline.identity
    dim = identity["hidden_size"]
    trained = fit(torch.randn(4, 3, 2, dim, generator=torch.Generator().manual_seed(0)), torch.ones(4, 3, dtype=torch.bool),
                  torch.zeros(4, 3, dtype=torch.long), VerifierConfig(epochs=1, restarts=1)).verifier
    save_checkpoint(tmp_path / "trained.safetensors", trained, identity)
    report = compare(CompareSettings(model_args=f"pretrained={tiny_model_dir},n_branches=3", tasks=["lover_gsm8k"],
                                     include_path=str(REPO / "task_configs"), limit=3, out=tmp_path, n_boot=200,
                                     gen_kwargs="max_gen_toks=8", layers=[1, -1],
                                     checkpoints={"trained": str(tmp_path / "trained.safetensors")}))
    rows = report["tasks"]["lover_gsm8k"]["rows"]
    # ptrue_max is opt-in (ptrue=true) and the supervised rows come from a supervised_verifier= checkpoint
    assert set(rows) == set(ROWS) - {"supervised_max", "supervised_sum", "ptrue_max"} | {"trained_max", "trained_sum"}
    assert "| trained_sum |" in (tmp_path / "leaderboard.md").read_text()
    diagnostics = report["tasks"]["lover_gsm8k"]["diagnostics"]
    assert set(diagnostics) == {"lover", "ccs", "pca", "trained", "supervised_cv"}  # the probes fit beside LoVer
    assert diagnostics["lover"]["questions"] == 3 and diagnostics["lover"]["branches"] == 9
    sweep = report["tasks"]["lover_gsm8k"]["layer_sweep"]
    assert sweep["layers"] == [1, 4] and len(sweep["lover_sum"]) == 2  # -1 -> the last of the tiny llama's 4 layers
    assert (tmp_path / "accuracy_vs_layer.png").stat().st_size > 0
    assert "Layer sweep on lover_gsm8k" in (tmp_path / "leaderboard.md").read_text()
    assert all(row["n"] == 3 and 0.0 <= row["low"] <= row["acc"] <= row["high"] <= 1.0 for row in rows.values())
    # lm-eval's filter rows carry their picks' one-answer share (3 questions: too few to call one answer); rows
    # derived here (cross-fit, extra checkpoints) have no lm-eval picks
    assert all(rows[r]["answered"] <= 3 and rows[r]["one_answer"] is False for r in ("greedy", "majority", "lover_sum"))
    assert "answered" not in rows["supervised_cv_sum"] and "answered" not in rows["trained_sum"]
    assert "one answer" not in (tmp_path / "leaderboard.md").read_text()
    assert set(report["tasks"]["lover_gsm8k"]["paired"]) == {"majority", "cot_sum"}
    # every row but the vote itself and the oracle, against the vote; lover_sum's the same draw as "paired"'s
    vs_majority = report["tasks"]["lover_gsm8k"]["vs_majority"]
    assert set(vs_majority) == set(rows) - {"majority", "pass_at_n"}
    assert vs_majority["lover_sum"] == report["tasks"]["lover_gsm8k"]["paired"]["majority"]
    assert all(abs(vs_majority[r]["diff"] - (rows[r]["acc"] - rows["majority"]["acc"])) < 1e-12 for r in vs_majority)
    assert "| row − majority | lover_gsm8k |" in (tmp_path / "leaderboard.md").read_text()
    assert report["tasks"]["lover_gsm8k"]["accuracy_vs_n"]["n"] == [1, 2, 3]
    assert 1.0 <= report["tasks"]["lover_gsm8k"]["distinct_answers"] <= 3.0
    assert json.loads((tmp_path / "leaderboard.json").read_text())["limit"] == 3
    per_question = [json.loads(line) for line in (tmp_path / "per_question.jsonl").read_text().splitlines()]
    assert [line["doc_id"] for line in per_question] == [0, 1, 2]
    assert set(per_question[0]) == set(rows) | {"task", "doc_id"}
    assert all(np.mean([line[name] for line in per_question]) == row["acc"] for name, row in rows.items())
    assert "| lover_sum |" in (tmp_path / "leaderboard.md").read_text()
    assert (tmp_path / "accuracy_vs_n.png").stat().st_size > 0
    branches = [json.loads(line) for line in (tmp_path / "branches.jsonl").read_text().splitlines()]
    assert [(b["doc_id"], b["branch"]) for b in branches] == [(q, k) for q in range(3) for k in range(3)]
    assert all(0.0 <= b[name] <= 1.0 for b in branches for name in ("lover", "trained", "supervised_cv"))
    assert np.mean([b["right"] for b in branches]) == diagnostics["lover"]["branch_accuracy"]
    # the sampling references, apart from the rows (they read the gold answer): maj@N is majority, pass@N pass_at_n,
    # avg@N the branches' mean accuracy; in a table of their own
    references = report["tasks"]["lover_gsm8k"]["references"]
    assert list(references) == ["avg@3", "pass@1", "pass@2", "pass@3", "maj@1", "maj@2", "maj@3"]
    assert not set(references) & set(rows) and not set(references) & set(per_question[0])
    assert references["maj@3"]["acc"] == rows["majority"]["acc"]
    assert references["pass@3"]["acc"] == rows["pass_at_n"]["acc"]
    assert abs(references["avg@3"]["acc"] - diagnostics["lover"]["branch_accuracy"]) < 1e-12
    assert all(cell["n"] == 3 and 0.0 <= cell["low"] <= cell["acc"] <= cell["high"] <= 1.0
               for cell in references.values())
    assert "| reference | lover_gsm8k |" in (tmp_path / "leaderboard.md").read_text()


def test_paired_rows_compares_saved_outcomes_on_shared_questions(tmp_path, capsys):
    """Run A has questions 0-3, run B questions 1-3 (in another order; named by its folder or its file).
    lover_sum of A is 1,1,1,0 and majority of B is 1,0,0 on 1-3: on the shared questions 1-3 A has 2/3, B 1/3,
    difference +1/3; within --docs 2:4 (questions 2 and 3) A 1/2, B 0/2, difference +1/2."""
    from benchmarks.paper.paired_rows import main

    def run(name, doc_ids, rows):
        folder = tmp_path / name
        folder.mkdir()
        lines = [{"task": "lover_gsm8k", "doc_id": doc_id, **{row: v[k] for row, v in rows.items()}}
                 for k, doc_id in enumerate(doc_ids)]
        (folder / "per_question.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        return folder

    a = run("a", [0, 1, 2, 3], {"lover_sum": [1, 1, 1, 0]})
    b = run("b", [3, 1, 2], {"majority": [0, 1, 0]})
    report = main([f"{a}:lover_sum", f"{b}:majority", "--n_boot", "200"])
    assert report["n"] == 3 and abs(report["paired"]["diff"] - 1 / 3) < 1e-12
    assert "n = 3" in capsys.readouterr().out
    assert main([f"{a}:lover_sum", f"{b / 'per_question.jsonl'}:majority", "--docs", "2:4"])["paired"]["diff"] == 0.5
    # Two tasks with the same doc_ids are different questions: pooled, A's 1,1 vs B's 0,1 on (t1, 0), (t2, 0).
    pooled = tmp_path / "pooled"
    pooled.mkdir()
    (pooled / "per_question.jsonl").write_text("".join(json.dumps(line) + "\n" for line in (
        {"task": "t1", "doc_id": 0, "lover_sum": 1, "majority": 0}, {"task": "t2", "doc_id": 0, "lover_sum": 1, "majority": 1})))
    assert main([f"{pooled}:lover_sum", f"{pooled}:majority", "--task", "all"])["n"] == 2
    assert main([f"{pooled}:lover_sum", f"{pooled}:majority", "--task", "all"])["paired"]["diff"] == 0.5
    with pytest.raises(SystemExit, match="or --task all"):
        main([f"{pooled}:lover_sum", f"{pooled}:majority"])
    for bad, message in (([f"{a}:cot_sum", f"{b}:majority"], "row 'cot_sum' is not in"),
                         ([f"{a}:lover_sum", f"{b}:majority", "--docs", "2-4"], "--docs .2-4. is not START:END")):
        with pytest.raises(SystemExit, match=message):
            main(bad)


def test_paired_rows_minus_pairs_every_row_with_the_base_as_compare_seeds_it(tmp_path):
    """Four questions, majority 1,0,0,1 (1/2); cot_sum 1,1,0,1 (3/4): +1/4; lover_sum 0,0,0,1 (1/4): −1/4. Every
    row but the base is paired, and each interval is the one `lover compare` draws for that pair
    (interval_rng(seed, task, row, base)), so lover_sum − majority reads as compare's own paired row."""
    from benchmarks.paper.paired_rows import main
    from lover_lmeval.core.stats import interval_rng, paired_bootstrap

    rows = {"majority": [1, 0, 0, 1], "cot_sum": [1, 1, 0, 1], "lover_sum": [0, 0, 0, 1]}
    lines = [{"task": "lover_gsm8k", "doc_id": i, **{row: v[i] for row, v in rows.items()}} for i in range(4)]
    (tmp_path / "per_question.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "vs_majority.json"
    report = main([str(tmp_path), "--minus", "majority", "--n_boot", "300", "--out", str(out)])
    assert set(report["rows"]) == {"cot_sum", "lover_sum"} and report["n"] == 4 and report["acc_base"] == 0.5
    assert report["rows"]["cot_sum"]["diff"] == 0.25 and report["rows"]["lover_sum"]["diff"] == -0.25
    expected = paired_bootstrap(np.array(rows["lover_sum"], float), np.array(rows["majority"], float), 300,
                                interval_rng(0, "lover_gsm8k", "lover_sum", "majority"))
    assert report["rows"]["lover_sum"] == {"acc": 0.25, **expected}
    assert json.loads(out.read_text()) == report
    for bad, message in (([str(tmp_path), f"{tmp_path}:majority", "--minus", "majority"], "not both or neither"),
                         ([f"{tmp_path}:lover_sum"], "not both or neither"),
                         ([str(tmp_path), "--minus", "greedy"], "row 'greedy' is not in"),
                         ([str(tmp_path), "--minus", "majority", "--docs", "0:2"], "--docs is not taken")):
        with pytest.raises(SystemExit, match=message):
            main(bad)


def test_rows_of_a_verifier_made_with_labels_say_how_many():
    """lover with the dev-66 selection (tag "[dev66]") and a label-free extra verifier ("" tag): only lover's two
    rows are renamed; a verifier missing from `tags` keeps its names too."""
    assert tagged_rows({"lover": "[dev66]", "trained": ""}, ["lover", "trained", "other"]) == {
        "lover_max": "lover_max[dev66]", "lover_sum": "lover_sum[dev66]"}


def test_the_leaderboard_says_where_a_row_answers_one_way():
    """A row that pick_shares calls one answer (here lover_sum, "no" to 25 of 25) shows its share in its cell, and
    the note under the table says why; majority's cell is left as it is."""
    row = {"acc": 0.58, "low": 0.40, "high": 0.76, "n": 25}
    report = {"one_answer_rule": {"share": 0.95, "min_questions": 20},
              "tasks": {"lover_bbh_navigate": {
                  "rows": {"majority": {**row, "top_pick_share": 0.72, "answered": 25, "one_answer": False},
                           "lover_sum": {**row, "top_pick_share": 1.0, "answered": 25, "one_answer": True}},
                  "distinct_answers": 2.0, "paired": {}}}}
    text = render_markdown(report)
    assert "References" not in text  # a report without the sampling references (older leaderboard.json) has no table
    assert "| lover_sum | 0.580 [0.400, 0.760] n=25, one answer 100% |" in text
    assert "| majority | 0.580 [0.400, 0.760] n=25 |" in text
    assert "(≥ 95%, of ≥ 20 answered questions)" in text
