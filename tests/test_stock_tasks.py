"""Selector rows on lm-eval's own generative tasks, included as lm-eval ships them (tests/stock_yaml.py points only
their data at ../shared/data): harness/stock_rows.py, harness/repeats.py, harness/task_hook.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from lm_eval.tasks import TaskManager

import in_process
import stock_yaml
from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.results import LoverResult
from lover_lmeval.harness import repeats
from lover_lmeval.harness.model_args import LoverUsageError
from lover_lmeval.harness.sampling_rows import add_sampling_rows
from lover_lmeval.harness.stock_rows import (LoverPick, add_rows, available_rows, metric_normaliser, plan_task,
                                             task_chains)
from lover_lmeval.core.select.answers import get_extractor


@pytest.fixture(scope="module")
def stock(tmp_path_factory) -> Path:
    return stock_yaml.write_overrides(tmp_path_factory.mktemp("stock"))


@pytest.fixture(scope="module")
def tasks(stock) -> dict:
    return TaskManager(include_path=str(stock)).load(list(stock_yaml.TASKS))["tasks"]


def branch(text: str) -> Branch:
    return Branch(text, [1], [0.5], [(0, len(text))], "stop")


def test_gsm8k_cot_groups_by_each_of_its_two_chains_as_its_metric_normalises(tasks):
    """strict-match reads "The answer is (-?[0-9.,]+)." and flexible-extract the last number; exact_match then drops
    ',', '$', a final '.' (regexes_to_ignore) and lower-cases: "The answer is 1,000. So $1,000." -> strict "1,000."
    -> "1000"; flexible "1,000." -> "1000"; a text without the sentence has no strict answer."""
    plan = plan_task(tasks["gsm8k_cot"], None)
    assert [prefix for prefix, _, _ in plan.groupings] == ["strict-match/", "flexible-extract/"]
    strict, flexible = (get_extractor(name) for _, _, name in plan.groupings)
    assert strict("The answer is 1,000. So $1,000.").value == "1000"
    assert flexible("The answer is 1,000. So $1,000.").value == "1000"
    assert strict("It is 7") is None and flexible("It is 7").value == "7"
    assert plan.fit_extract == "gsm8k_cot/strict-match"


def test_mmlu_pro_letter_is_grouped_case_and_punctuation_free(tasks):
    """mmlu_pro's regex 'answer is \\(?([ABCDEFGHIJ])\\)?' with ignore_case and ignore_punctuation: "(C)" -> "c"."""
    (_, _, name), = plan_task(tasks["mmlu_pro_biology"], None).groupings
    assert get_extractor(name)("so the answer is (C).").value == "c"


def test_self_consistency_chains_read_alike_so_rows_are_once_and_named_by_selector(tasks):
    """score-first, maj@64 and maj@8 differ only in reducers (take_first_k, majority_vote, take_first): one reading,
    so one set of rows, named by the selector alone."""
    task = tasks["gsm8k_cot_self_consistency"]
    assert [c.name for c in task_chains(task)] == ["score-first"]
    assert plan_task(task, None).groupings[0][0] == ""


def test_process_results_task_gets_no_rows_and_a_message_unless_extract_is_named(tasks):
    task = tasks["hendrycks_math500"]
    plan = plan_task(task, None)
    assert plan.groupings == [] and plan.fit_extract is None
    assert "hendrycks_math500" in plan.why_none and "pass extract=math in --model_args" in plan.why_none
    named = plan_task(task, "number")
    assert named.fit_extract == "number" and named.groupings[0][0] == ""


def test_selector_row_on_a_stock_task_scores_the_branch_its_pick_names(tasks):
    """Planted: branches answer 3, 5, 5 ("The answer is N."); majority picks the group of 5, whose first branch is
    branch 1, so the row hands branch 1's text to bbh's regex: the row reads "5", greedy's row reads "3"."""
    task = tasks["bbh_cot_fewshot_boolean_expressions"]
    plan = plan_task(task, None)
    (_, chain, name), = plan.groupings
    result = LoverResult([branch("So the answer is 3."), branch("so the answer is 5."), branch("So the answer is 5.")])
    picked = LoverPick("majority", name).apply([[result]], [{}])
    assert picked == [["so the answer is 5."]]
    steps = [step() for step in chain.steps]
    read = picked
    for step in steps:
        read = list(step.apply(read, [{}]))
    assert read == [["5"]]
    assert LoverPick("greedy", name).apply([[result]], [{}]) == [["So the answer is 3."]]


def test_rows_are_added_once_and_omit_the_oracle_and_unscored_rows(tasks):
    rows = available_rows({"lover"})
    assert "pass_at_n" not in rows and "ccs_max" not in rows and "lover_sum" in rows and "majority" in rows
    task = tasks["mmlu_pro_biology"]
    before = len(task._filters)
    plan = plan_task(task, None)
    add_rows(plan, rows)
    add_rows(plan, rows)
    assert len(task._filters) == before + len(rows)


class _Request:
    def __init__(self, repeats, task="t"):
        self.repeats, self.task_name = repeats, task


def test_repeats_collapse_to_one_question_and_copy_j_is_branch_j():
    """Three copies of a repeats-3 request then one plain request: two questions, counts 3 and 1; the three copies'
    texts are branches 0, 1, 2."""
    a, b = _Request(3), _Request(1)
    unique, counts = repeats.collapse([a, a, a, b])
    assert unique == [a, b] and counts == [3, 1]
    result = LoverResult([branch("x0"), branch("x1"), branch("x2")])
    copies = repeats.expand([result, LoverResult([branch("y")])], counts)
    assert [str.__str__(c) for c in copies] == ["x0", "x1", "x2", "y"]
    assert all(c.branches is result.branches for c in copies[:3])


def test_repeats_set_n_unless_model_args_contradict_them():
    assert repeats.branches_for(_Request(64), 10, set()) == 64
    assert repeats.branches_for(_Request(1), 10, {"n_branches"}) == 10
    with pytest.raises(LoverUsageError, match="repeats: 64.*n_branches=4"):
        repeats.branches_for(_Request(64, "gsm8k_cot_self_consistency"), 4, {"n_branches"})


def _text(response):
    """A logged response as text: a lover result left unfiltered (a `process_results` task's `take_first` row) is
    logged as its JSON (core/results.py), whose branch 0 is the text the task scored."""
    try:
        logged = json.loads(response)
    except (TypeError, ValueError):
        return response
    return logged["texts"][0] if isinstance(logged, dict) and "texts" in logged else response


def _samples(folder: Path, task: str) -> dict[str, dict[int, object]]:
    """filter -> doc_id -> (filtered response as text, exact_match), from a --log_samples run."""
    (path,) = folder.rglob(f"samples_{task}_*.jsonl")
    out: dict[str, dict[int, object]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        sample = json.loads(line)
        out.setdefault(sample["filter"], {})[sample["doc_id"]] = (
            [_text(r) for r in sample["filtered_resps"]], sample.get("exact_match"))
    return out


def _run(model: str, model_args: str, tasks: str, stock: Path, out: Path, *extra: str):
    return in_process.lm_eval(["--model", model, "--model_args", model_args, "--tasks", tasks, "--include_path",
                               str(stock), "--limit", "2", "--gen_kwargs", "max_gen_toks=32", "--log_samples",
                               "--output_path", str(out), *extra], out.parent)


@pytest.mark.slow
def test_stock_gsm8k_and_bbh_get_every_selector_row_and_greedy_equals_hf(stock, smollm2_dir, tmp_path, tasks):
    """lover_hf with 3 branches on lm-eval's gsm8k_cot (two chains) and bbh_cot_fewshot_boolean_expressions (one):
    the tasks' own rows and each chain's greedy row read exactly what `--model hf` reads on the same model; the
    sampling rows in lm-eval's table are the slow reference's (each logged branch through the task's chain and
    metric, every k-subset enumerated)."""
    names = "gsm8k_cot,bbh_cot_fewshot_boolean_expressions"
    done = _run("lover_hf", f"n_branches=3,bank={tmp_path / 'bank.sqlite'}", names, stock, tmp_path / "lover")
    _run("hf", f"pretrained={smollm2_dir}", names, stock, tmp_path / "hf")
    assert "4 questions x 3 branches" in done.stderr
    assert "for gsm8k_cot its own rows (strict-match, flexible-extract: branch 0)" in done.stderr
    lover = _samples(tmp_path / "lover", "gsm8k_cot")
    hf = _samples(tmp_path / "hf", "gsm8k_cot")
    for chain in ("strict-match", "flexible-extract"):
        assert lover[chain] == hf[chain] == lover[f"{chain}/greedy"]
        assert {f"{chain}/majority", f"{chain}/lover_sum", f"{chain}/cisc_t0.1"} <= set(lover)
    lover = _samples(tmp_path / "lover", "bbh_cot_fewshot_boolean_expressions")
    hf = _samples(tmp_path / "hf", "bbh_cot_fewshot_boolean_expressions")
    assert lover["get-answer"] == hf["get-answer"] == lover["greedy"]
    assert {"majority", "lover_max", "self_certainty"} <= set(lover)
    assert "gave no answer the 'number' extractor" not in done.stderr
    for name in names.split(","):
        _sampling_rows_are_the_slow_references(tmp_path / "lover", tasks[name])
    _opens_in_lover_view(tmp_path / "lover", tmp_path)


def _sampling_rows_are_the_slow_references(out: Path, task) -> None:
    """The run's avg@3, pass@k and maj@k of each chain, as lm-eval aggregated them, against `_reference` over the
    logged branches and docs; maj@3 is the chain's majority row (the vote over all three branches)."""
    name = task.config.task
    results = json.loads(next(out.rglob("results_*.json")).read_text(encoding="utf-8"))
    metrics, sampling = results["results"][name], results["config"]["lover"]["sampling_rows"][name]
    (path,) = out.rglob(f"samples_{name}_*.jsonl")
    questions = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        sample = json.loads(line)
        questions[sample["doc_id"]] = (sample["doc"], sample["lover"]["texts"])
    chains, normalise = task_chains(task), metric_normaliser(task)  # the answers as its exact_match compares them
    prefix = {c.name: "" if len(chains) == 1 else c.name + "/" for c in chains}
    expected = {}
    for chain in chains:
        for doc, texts in questions.values():
            read = [[t] for t in texts]
            for step in chain.steps:
                read = [list(r) for r in step().apply(read, [doc] * len(read))]
            responses = [r[0] for r in read]
            per_branch = [float(task.process_results(doc, [r])["exact_match"]) for r in responses]
            answers = [None if r == "[invalid]" or not r.strip() else normalise(r) for r in responses]
            expected.setdefault(f"{prefix[chain.name]}avg@3", []).append(sum(per_branch) / 3)
            for k in (1, 2, 3):
                passed, voted = _reference(per_branch, answers, k)
                expected.setdefault(f"{prefix[chain.name]}pass@{k}", []).append(passed)
                expected.setdefault(f"{prefix[chain.name]}maj@{k}", []).append(voted)
        assert metrics[f"exact_match,{prefix[chain.name]}maj@3"] == metrics[f"exact_match,{prefix[chain.name]}majority"]
    assert sorted(sampling) == sorted(expected)
    assert {row: metrics[f"exact_match,{row}"] for row in sampling} == pytest.approx(
        {row: sum(values) / len(values) for row, values in expected.items()})


def _opens_in_lover_view(out: Path, cwd: Path) -> None:
    """`lover view` on the stock run, in another process than the run's (here: after it, with the run's chain
    extractors rebuilt from the results file): each row's accuracy is lm-eval's, each question's gold answer is the
    target as exact_match normalises it, each branch's answer is what the task's first chain reads in its text, and
    its tokens and CoT margins come from the run's bank (every question of both tasks banked)."""
    from test_view import page_data

    from lover_lmeval.core.select.answers import TASK_EXTRACTORS, get_extractor

    TASK_EXTRACTORS.clear()  # what the run registered: the page must rebuild it from the results file
    in_process.lover(["view", str(out)], cwd)
    data = page_data(out / "lover_view.html")
    results = json.loads(next(out.rglob("results_*.json")).read_text(encoding="utf-8"))
    tasks = {task["name"]: task for task in data["tasks"]}
    assert set(tasks) == {"gsm8k_cot", "bbh_cot_fewshot_boolean_expressions"}
    task = tasks["gsm8k_cot"]
    assert task["extract"] == "gsm8k_cot/strict-match"
    sampling = results["config"]["lover"]["sampling_rows"]["gsm8k_cot"]  # the references: apart from the rows
    reported = {key.split(",")[1]: value for key, value in results["results"]["gsm8k_cot"].items()
                if key.startswith("exact_match,")}
    assert {row["name"]: row["acc"] for row in task["rows"]} == {
        name: value for name, value in reported.items() if name not in sampling}
    assert {ref["name"]: ref["acc"] for ref in task["references"]} == pytest.approx(
        {name.removeprefix("strict-match/"): reported[name] for name in sampling if name.startswith("strict-match/")})
    samples = [json.loads(line) for line in next(out.rglob("samples_gsm8k_cot_*.jsonl")).read_text().splitlines()]
    normalise = metric_normaliser(SimpleNamespace(config=SimpleNamespace(**results["configs"]["gsm8k_cot"])))
    strict = get_extractor("gsm8k_cot/strict-match")
    for sample in samples:
        question = next(q for q in task["questions"] if q["d"] == sample["doc_id"])
        assert question["g"] == normalise(sample["target"])
        texts = sample["lover"]["texts"]
        assert [b[0] for b in question["b"]] == texts
        assert [b[1] for b in question["b"]] == [a.value if (a := strict(t)) else None for t in texts]
    assert all(task["banked"] == 2 for task in tasks.values())
    branches = [b for q in task["questions"] for b in q["b"]]
    assert any(b[3] > 0 for b in branches) and all(len(b[6]) == b[3] for b in branches)  # tokens, their margins


@pytest.mark.slow
def test_stock_mmlu_pro_rows_and_a_process_results_task_without_extract_says_why(stock, smollm2_dir, tmp_path):
    """mmlu_pro_biology (regex, ignore_case / ignore_punctuation) and hendrycks_math500 (process_results, no chain)
    zero-shot: mmlu_pro has every row and greedy equal to hf's; hendrycks_math500 keeps its own row (equal to hf's),
    gets no selector row, no maj@k and no fit (avg@2 and pass@k only), and the log names the task and the fix."""
    names = "mmlu_pro_biology,hendrycks_math500"
    done = _run("lover_hf", "n_branches=2", names, stock, tmp_path / "lover", "--num_fewshot", "0")
    _run("hf", f"pretrained={smollm2_dir}", names, stock, tmp_path / "hf", "--num_fewshot", "0")
    assert "4 questions x 2 branches" in done.stderr
    lover, hf = _samples(tmp_path / "lover", "mmlu_pro_biology"), _samples(tmp_path / "hf", "mmlu_pro_biology")
    assert lover["custom-extract"] == hf["custom-extract"] == lover["greedy"]
    assert {"majority", "lover_sum"} <= set(lover)
    assert "task hendrycks_math500: its answers are read in process_results" in done.stderr
    lover, hf = _samples(tmp_path / "lover", "hendrycks_math500"), _samples(tmp_path / "hf", "hendrycks_math500")
    assert lover["none"] == hf["none"]  # its own row; avg@N and pass@k by its process_results, no maj@k (no groups)
    assert set(lover) == {"none", "avg@2", "pass@1", "pass@2"}
    results = json.loads(next((tmp_path / "lover").rglob("results_*.json")).read_text(encoding="utf-8"))
    fits = _find(results, "test_time_fits")
    assert "mmlu_pro_biology" in fits and "hendrycks_math500" not in fits  # no fit on `number` by default


@pytest.mark.slow
def test_stock_process_results_task_with_extract_named_gets_its_rows(stock, tmp_path):
    """hendrycks_math500 with extract=number: its answers grouped by the number extractor, each row's branch scored
    by the task's own process_results; the greedy row is its own `none` row."""
    done = _run("lover_hf", "n_branches=2,extract=number", "hendrycks_math500", stock, tmp_path / "lover",
                "--num_fewshot", "0")
    assert "2 questions x 2 branches" in done.stderr
    lover = _samples(tmp_path / "lover", "hendrycks_math500")
    assert {"none", "greedy", "majority", "lover_sum"} <= set(lover) and lover["greedy"] == lover["none"]


@pytest.mark.slow
def test_stock_minerva_math500_with_extract_math_groups_by_equivalence_and_scores_by_its_own_metrics(stock, tmp_path):
    """lm-eval's minerva_math500 (4-shot, process_results with exact_match and math_verify) with extract=math: every
    selector's row under both of its metrics, the greedy row its own `none` row (branch 0), and the test-time fit
    grouped by the math extractor."""
    done = _run("lover_hf", "n_branches=2,extract=math", "minerva_math500", stock, tmp_path / "lover")
    assert "2 questions x 2 branches" in done.stderr
    lover = _samples(tmp_path / "lover", "minerva_math500")
    assert {"none", "greedy", "majority", "lover_sum", "cot_max"} <= set(lover) and lover["greedy"] == lover["none"]
    results = json.loads(next((tmp_path / "lover").rglob("results_*.json")).read_text(encoding="utf-8"))
    metrics = results["results"]["minerva_math500"]
    assert {"exact_match,majority", "math_verify,majority", "math_verify,greedy"} <= set(metrics)
    assert _find(results, "test_time_fits")["minerva_math500"]["extract"] == "math"


def _find(tree, key: str):
    """The first value under `key` anywhere in a JSON tree."""
    if isinstance(tree, dict):
        if key in tree:
            return tree[key]
        tree = list(tree.values())
    for value in tree if isinstance(tree, list) else ():
        found = _find(value, key)
        if found is not None:
            return found
    return None


@pytest.mark.slow
def test_stock_self_consistency_is_one_question_with_repeats_branches(stock, tmp_path):
    """gsm8k_cot_self_consistency (repeats: 64, sampled) on 1 question: decoded once with 64 branches; maj@64,
    maj@8 and score-first read those branches (score-first = branch 0 = the greedy-named row)."""
    out = tmp_path / "lover"
    done = in_process.lm_eval(["--model", "lover_hf", "--tasks", "gsm8k_cot_self_consistency", "--include_path",
                               str(stock), "--limit", "1", "--num_fewshot", "0", "--gen_kwargs", "max_gen_toks=16",
                               "--log_samples", "--output_path", str(out)], tmp_path)
    assert "1 questions x 64 branches" in done.stderr
    samples = _samples(out, "gsm8k_cot_self_consistency")
    assert {"maj@64", "maj@8", "score-first", "majority", "lover_sum"} <= set(samples)
    assert samples["score-first"] == samples["greedy"]


def test_lover_compare_reads_a_stock_task_by_its_first_chain_and_refuses_one_it_cannot_group(tasks):
    """gsm8k_cot: grouped by strict-match (its first chain), its rows paired under `strict-match/`, the gold answer
    normalised as its exact_match normalises ("#### 1,000" -> "1000"); hendrycks_math500 (process_results, no chain)
    is refused before any model loads, naming the task and the fix, unless extract= is named."""
    from lover_lmeval.apps.samples import TaskNotComparable, check_task

    reading = check_task(tasks["gsm8k_cot"])
    assert (reading.extract, reading.metric, reading.prefix) == ("gsm8k_cot/strict-match", "exact_match",
                                                                  "strict-match/")
    assert reading.normalise("Natalia sold 1,000 clips. #### 1,000") == "1000"
    assert check_task(tasks["bbh_cot_fewshot_boolean_expressions"]).prefix == ""
    with pytest.raises(TaskNotComparable, match="task hendrycks_math500: .*extract="):
        check_task(tasks["hendrycks_math500"])
    assert check_task(tasks["hendrycks_math500"], "math").extract == "math"


@pytest.mark.slow
def test_lover_compare_on_a_stock_task_pairs_the_rows_of_the_chain_it_groups_by(stock, tmp_path):
    """`lover compare --tasks gsm8k_cot` (lm-eval's YAML): the leaderboard has the task's own rows and both chains'
    selector rows as lm-eval scored them, the paired differences of strict-match/lover_sum against strict-match's
    majority and cot_sum, and the references (avg@3, pass@k, maj@k) over the same branches."""
    out = tmp_path / "compare"
    in_process.lover(["compare", "--model_args", "n_branches=3", "--tasks", "gsm8k_cot", "--include_path", str(stock),
                      "--limit", "2", "--gen_kwargs", "max_gen_toks=32", "--n_boot", "200", "--cv_folds", "0",
                      "--out", str(out)], tmp_path)
    entry = json.loads((out / "leaderboard.json").read_text(encoding="utf-8"))["tasks"]["gsm8k_cot"]
    assert entry["extract"] == "gsm8k_cot/strict-match"
    assert {"strict-match", "flexible-extract", "strict-match/majority", "flexible-extract/lover_sum"} <= set(
        entry["rows"])
    assert set(entry["paired"]) == {"majority", "cot_sum"}
    # every row against the chain's vote the fit grouped by, the task's own rows (branch 0) too
    assert {"strict-match", "flexible-extract/lover_sum"} <= set(entry["vs_majority"])
    assert "strict-match/majority" not in entry["vs_majority"]
    assert "avg@3" in entry["references"]
    assert (out / "per_question.jsonl").read_text().count("\n") == 2


def _scored(task, n: int, results: list, docs: list[dict], user_extract: str | None = None) -> dict[str, list]:
    """Each sampling row's per-question metrics, as lm-eval computes them: the task's filters applied to instances
    holding `results` (FilterEnsemble.apply, as `task.apply_filters` does), then `task.process_results` per row."""
    from lm_eval.api.instance import Instance

    plan = add_sampling_rows(task, n, user_extract)
    instances = [Instance("generate_until", doc, ("", {}), 0, (task.config.task, i, 1), resps=[result])
                 for i, (doc, result) in enumerate(zip(docs, results))]
    ensembles = {ensemble.name: ensemble for ensemble in task._filters}
    for name in plan.names:
        ensembles[name].apply(instances)
    return {name: [task.process_results(inst.doc, [inst.filtered_resps[name]]) for inst in instances]
            for name in plan.names}


def test_sampling_rows_on_bbh_score_each_branch_by_the_tasks_own_chain_and_metric(tasks):
    """bbh boolean_expressions, gold "True", branches True, True, False, none (4): the task's regex reads "True",
    "True", "False", "[invalid]" and its exact_match scores 1, 1, 0, 0.
    avg@4 = 2/4 = 0.5; pass@2 = 1 - C(2, 2)/C(4, 2) = 1 - 1/6 = 5/6; pass@4 = 1.
    maj@2: the 6 pairs {01, 02, 03, 12, 13, 23}: True wins 01, 03, 13 outright and 02, 12 by the tie-break (its branch
    is the lower index), False wins 23 (the unanswered branch votes for nothing): 5/6. maj@4 = 1 (True 2 votes to 1)."""
    task = tasks["bbh_cot_fewshot_boolean_expressions"]
    result = LoverResult([branch("So the answer is True."), branch("so the answer is True."),
                          branch("So the answer is False."), branch("I do not know.")])
    scored = _scored(task, 4, [result], [{"input": "not ( True ) and ( True ) is", "target": "True"}])
    values = {name: rows[0]["exact_match"] for name, rows in scored.items()}
    assert list(values) == ["avg@4", "pass@1", "pass@2", "pass@4", "maj@1", "maj@2", "maj@4"]
    assert values == pytest.approx({"avg@4": 0.5, "pass@1": 0.5, "pass@2": 5 / 6, "pass@4": 1.0, "maj@1": 0.5,
                                    "maj@2": 5 / 6, "maj@4": 1.0})


def _reference(per_branch: list[float], answers: list, k: int) -> tuple[float, float]:
    """Slow pass@k and maj@k: every k-subset enumerated. maj: the most votes among the answered branches of the
    subset, a tie to the answer whose branch comes first in it; right where that answer's first branch scores 1."""
    from itertools import combinations

    passed = voted = 0
    subsets = list(combinations(range(len(per_branch)), k))
    for subset in subsets:
        passed += any(per_branch[i] == 1 for i in subset)
        votes = [answers[i] for i in subset if answers[i] is not None]
        if votes:
            winner = max(dict.fromkeys(votes), key=votes.count)  # max keeps the first of equal counts
            voted += per_branch[answers.index(winner)] == 1
    return passed / len(subsets), voted / len(subsets)


def test_sampling_rows_match_a_slow_reference_on_both_gsm8k_chains(tasks):
    """gsm8k_cot (two chains, exact_match dropping ',' and '$'), seeded random branches over a few answers, some cut
    off or unmarked: each chain's avg@N, pass@k and maj@k equal the slow reference that scores each branch alone with
    the task's chain and metric and enumerates every k-subset."""
    import random

    rng = random.Random(0)
    task = tasks["gsm8k_cot"]
    texts = ["The answer is 1,000.", "The answer is 1000.", "The answer is 72.", "It is 72", "The answer is $5.",
             "no idea"]
    results = [LoverResult([branch(rng.choice(texts)) for _ in range(6)]) for _ in range(5)]
    docs = [{"question": "q", "answer": "#### 1,000"}, {"question": "q", "answer": "#### 72"}] * 2 + [
        {"question": "q", "answer": "#### 5"}]
    scored = _scored(task, 6, results, docs)
    chains = {c.name: c for c in task_chains(task)}
    for q, (result, doc) in enumerate(zip(results, docs)):
        for chain_name, chain in chains.items():
            read = [[t] for t in result.texts]
            for step in chain.steps:
                read = [list(r) for r in step().apply(read, [doc] * len(read))]
            responses = [r[0] for r in read]
            per_branch = [task.process_results(doc, [r])["exact_match"] for r in responses]
            answers = [None if r == "[invalid]" else r.replace(",", "").replace("$", "").rstrip(".")
                       for r in responses]
            assert scored[f"{chain_name}/avg@6"][q]["exact_match"] == pytest.approx(sum(per_branch) / 6)
            for k in (1, 2, 4, 6):
                passed, voted = _reference(per_branch, answers, k)
                assert scored[f"{chain_name}/pass@{k}"][q]["exact_match"] == pytest.approx(passed), (q, k)
                assert scored[f"{chain_name}/maj@{k}"][q]["exact_match"] == pytest.approx(voted), (q, k)


def test_a_process_results_task_gets_avg_and_pass_and_maj_only_with_extract(stock):
    """hendrycks_math500 scores in process_results (the text between the first and last `$` against the boxed
    solution): branches "$5$", "$7$", "It is $5$." on a solution boxing 5 score 1, 0, 1: avg@3 = 2/3, pass@2 = 1.
    Its branches group only by a named extractor: no maj@k without extract=, maj@3 = 1 with extract=number."""
    doc = {"problem": "2 + 3?", "solution": "It is $\\boxed{5}$."}
    result = LoverResult([branch("$5$"), branch("$7$"), branch("It is $5$.")])
    for user_extract, names in ((None, ["avg@3", "pass@1", "pass@2", "pass@3"]),
                                ("number", ["avg@3", "pass@1", "pass@2", "pass@3", "maj@1", "maj@2", "maj@3"])):
        task = TaskManager(include_path=str(stock)).load(["hendrycks_math500"])["tasks"]["hendrycks_math500"]
        scored = _scored(task, 3, [result], [doc], user_extract)
        assert list(scored) == names
        assert scored["avg@3"][0]["exact_match"] == pytest.approx(2 / 3) and scored["pass@2"][0]["exact_match"] == 1
    assert scored["maj@3"][0]["exact_match"] == 1


def test_a_metric_not_0_1_per_branch_gets_avg_only_said_once(tasks):
    """A task whose metric gives 0.25 and 0.75 on branches: avg@2 = 0.5, and no pass@k or maj@k value, said once."""
    from lover_lmeval.log import model_name

    task = tasks["mmlu_pro_biology"]
    task.process_results = lambda doc, results: {"exact_match": 0.25 if results[0] == "A" else 0.75}
    result = LoverResult([branch("The answer is (A)."), branch("The answer is (B).")])
    with in_process.logged(f"lm_eval.{model_name()}") as said:
        scored = _scored(task, 2, [result, result], [{}, {}])
    assert [row["exact_match"] for row in scored["avg@2"]] == [0.5, 0.5]
    assert all(not row for name, rows in scored.items() if name != "avg@2" for row in rows)
    assert sum("not 0/1 per branch: avg@2 only" in line for line in said) == 1


def test_self_consistency_sampling_rows_are_named_by_chain_where_its_own_rows_use_the_names(tasks):
    """gsm8k_cot_self_consistency's own maj@64 and maj@8 rows (64 repeats): the sampling rows over the 64 branches
    are `score-first/maj@8` etc., never a second filter of the task's own name."""
    task = tasks["gsm8k_cot_self_consistency"]
    plan = add_sampling_rows(task, 64, None)
    assert plan.names[0] == "score-first/avg@64" and "score-first/maj@8" in plan.names
    names = [ensemble.name for ensemble in task._filters]
    assert len(names) == len(set(names)) and {"maj@64", "maj@8", "score-first"} <= set(names)


@pytest.mark.slow
def test_lm_evals_own_samples_readers_read_each_branchs_text(stock, smollm2_dir):
    """lm-eval's W&B logger's samples table (`_generate_dataset`, pure pandas) and its trackio logger's traces
    (`_sample_to_trace`; trackio is not installed here, so its `Trace` is a record of what it is handed) over a
    lover_hf run's in-memory samples: the raw prediction is branch 0's text (a repeated request's first response),
    not the result's JSON; the task's own row's filtered prediction, and the trace's reply, its regex's answer; every
    branch's text is in `resps`, the evidence (finish reasons, scores) beside it."""
    from types import SimpleNamespace

    from lm_eval import simple_evaluate
    from lm_eval.loggers.trackio_logger import _sample_to_trace
    from lm_eval.loggers.wandb_logger import WandbLogger

    from lover_lmeval.harness.sample_log import evidence_of

    name = "bbh_cot_fewshot_boolean_expressions"
    out = simple_evaluate(model="lover_hf", model_args=f"pretrained={smollm2_dir},n_branches=2", tasks=[name],
                          task_manager=TaskManager(include_path=str(stock)), limit=2, log_samples=True,
                          gen_kwargs="max_gen_toks=16", num_fewshot=0)
    samples = out["samples"][name]
    own = [s for s in samples if s["filter"] == "get-answer"]
    table = WandbLogger._generate_dataset(None, own, out["configs"][name])  # reads no attribute of the logger
    for sample, raw, filtered in zip(own, table["raw_predictions"], table["filtered_predictions"]):
        evidence = evidence_of(sample)
        assert [str(text) for text in sample["resps"][0]] == evidence["texts"] and len(evidence["finish"]) == 2
        assert raw == evidence["texts"][0] and not raw.lstrip().startswith("{")
        assert type(filtered) is str and filtered == sample["filtered_resps"][0]
        trace = _sample_to_trace(SimpleNamespace(Trace=lambda messages, metadata: messages), sample, name,
                                 "generate_until")
        assert trace[1] == {"role": "assistant", "content": filtered}
