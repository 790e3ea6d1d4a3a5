"""`lover view` on real runs, each written as one HTML file and read back by headless Chromium, whose DOM must show the
runs' own numbers: the embedded SmolLM2 through the real `lm_eval` CLI over the golden bank (N = 10, chat template,
never decoding), and the golden run's `lover compare` folder (tests/golden.py). Both reuse the golden run's features
(the session's `golden_baseline`, which the suite computes for test_golden.py anyway), so no feature is computed
here: the lm_eval run costs its start-up and its fit."""

from __future__ import annotations

import glob
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import in_process
from lover_lmeval.apps.cli import main

REPO = Path(__file__).resolve().parents[1]
BANK = REPO / "tests" / "data" / "golden" / "smollm2_bank.jsonl.gz"
LIMIT = 2
CHROMIUM = next((found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))),
                None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH, so the page is not "
                                    "loaded in a browser (Debian: apt-get install -y chromium; .ci/run installs it)")


@pytest.fixture(scope="module")
def banked_run(golden_baseline, tmp_path_factory) -> Path:
    """`lm_eval --model lover_hf ... --log_samples --output_path` over the golden bank's first questions, reading a
    copy of the golden run's feature cache (its questions include these)."""
    root = tmp_path_factory.mktemp("view")
    shutil.copytree(golden_baseline[1], root / "features")
    in_process.lm_eval(["--model", "lover_hf", "--model_args",
                        f"bank={BANK},bank_only=true,feature_cache={root / 'features'}", "--apply_chat_template",
                        "--tasks", "lover_gsm8k", "--limit", str(LIMIT), "--log_samples", "--output_path",
                        str(root / "out")], root)
    return root


@pytest.fixture(scope="module")
def page(banked_run) -> Path:
    """`lover view` on the run's output folder; it prints the file's path."""
    done = in_process.lover(["view", str(banked_run / "out")], banked_run)
    path = Path(done.stdout.strip().splitlines()[-1])
    assert path == banked_run / "out" / "lover_view.html" and path.is_file()
    return path


def page_data(path: Path) -> dict:
    html = path.read_text(encoding="utf-8")
    return json.loads(re.search(r'<script type="application/json" id="lover-data">(.*?)</script>', html, re.S)[1])


def run_files(banked_run: Path) -> tuple[dict, list[dict]]:
    (results,) = glob.glob(str(banked_run / "out" / "*" / "results_*.json"))
    (samples,) = glob.glob(str(banked_run / "out" / "*" / "samples_lover_gsm8k_*.jsonl"))
    return json.loads(Path(results).read_text()), [json.loads(line) for line in open(samples)]


def rendered(page: Path, fragment: str = "") -> str:
    """The DOM after the page's scripts ran (`--dump-dom`; virtual time lets them finish), scripts and styles cut."""
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                           "--dump-dom", page.as_uri() + fragment], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    dom = re.sub(r"<(script|style)\b.*?</\1>", "", done.stdout, flags=re.S)
    assert 'data-ready="1"' in dom, "the page's script did not finish"
    errors = re.search(r'<pre id="errors"[^>]*>(.*?)</pre>', dom, re.S)
    assert errors and not errors[1].strip(), errors and errors[1]
    return dom


def shown(dom: str) -> tuple[int, int]:
    found = re.search(r'data-shown="(\d+)" data-total="(\d+)"', dom)
    return int(found[1]), int(found[2])


def test_the_page_holds_the_runs_own_numbers_branches_and_picks(banked_run, page):
    """One file, nothing loaded from elsewhere; each row's accuracy is lm-eval's, each question's picks its filters',
    its branches the logged texts with the bank's token counts and CoT margins."""
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)=", html) and "@import" not in html
    results, samples = run_files(banked_run)
    data = page_data(page)
    (task,) = data["tasks"]
    metrics = results["results"]["lover_gsm8k"]
    sampling = results["config"]["lover"]["sampling_rows"]["lover_gsm8k"]  # references, apart from the rows
    reported = {key.split(",")[1]: value for key, value in metrics.items() if key.startswith("exact_match,")}
    assert {row["name"]: row["acc"] for row in task["rows"]} == {
        name: value for name, value in reported.items() if name not in sampling}
    assert [(ref["name"], ref["n"]) for ref in task["references"]] == [(name, LIMIT) for name in sampling]
    assert all(abs(ref["acc"] - reported[ref["name"]]) < 1e-12 for ref in task["references"])
    names = [row["name"] for row in task["rows"]]
    assert task["banked"] == LIMIT and [q["d"] for q in task["questions"]] == list(range(LIMIT))
    for sample in (s for s in samples if s["filter"] not in sampling):
        question = task["questions"][sample["doc_id"]]
        assert question["k"][names.index(sample["filter"])] == sample["filtered_resps"][0][0]
        assert question["o"][names.index(sample["filter"])] == str(int(sample["exact_match"]))
        assert [b[0] for b in question["b"]] == sample["lover"]["texts"]
        assert question["g"] == sample["target"] and question["p"] == sample["arguments"]["gen_args_0"]["arg_0"]
    branches = [b for q in task["questions"] for b in q["b"]]
    assert len(branches) == LIMIT * 10 and all(b[3] > 0 and len(b[6]) == b[3] for b in branches)
    assert task["reversed"] == results["config"]["lover"]["test_time_fits"]["lover_gsm8k"]["rank_checks"]["reversed"]


@needs_chromium
def test_chromium_shows_the_rows_a_filter_and_a_question(banked_run, page):
    """The rendered rows equal the results file's; `#filter=none_right` shows the questions whose pass_at_n is 0;
    `#q=1` opens question 1 with its 10 branches and every row's pick; no error on the way."""
    results, samples = run_files(banked_run)
    dom = rendered(page)
    cells = dict(re.findall(r'<tr data-row="([^"]+)"[^>]*><td><code>[^<]*</code></td>'
                            r'<td class="num acc" data-value="[^"]*">([^<]*)</td>', dom))
    metrics = results["results"]["lover_gsm8k"]
    sampling = results["config"]["lover"]["sampling_rows"]["lover_gsm8k"]
    assert cells == {key.split(",")[1]: f"{value:.3f}" for key, value in metrics.items()
                     if key.startswith("exact_match,") and key.split(",")[1] not in sampling}
    assert re.findall(r'<span class="ref" data-ref="([^"]+)">', dom) == sampling
    assert shown(dom) == (LIMIT, LIMIT)
    reversed_fits = results["config"]["lover"]["test_time_fits"]["lover_gsm8k"]["rank_checks"]["reversed"]
    assert len(re.findall(r'<div class="note bad">the test-time \w+ fit runs backwards', dom)) == len(reversed_fits)
    none_right = [s["doc_id"] for s in samples if s["filter"] == "pass_at_n" and s["exact_match"] == 0]
    filtered = rendered(page, "#filter=none_right")
    assert shown(filtered) == (len(none_right), LIMIT) and len(none_right) < LIMIT
    assert re.findall(r'<div class="qrow[^"]*" data-doc="(\d+)"', filtered) == [str(d) for d in none_right]
    question = rendered(page, "#q=1")
    assert '<h3 id="qtitle" data-doc="1">' in question
    answers = re.findall(r'<div class="branch[^"]*" data-k="\d+">.*?<b class="answer">([^<]*)</b>', question)
    assert len(answers) == 10
    picks = {s["filter"]: s["filtered_resps"][0][0] for s in samples if s["doc_id"] == 1 and s["filter"] not in sampling}
    shown_picks = dict(re.findall(r'<span class="pick" data-row="([^"]+)" data-outcome="\d"><code>[^<]*</code> '
                                  r'<b>([^<]*)</b>', question))
    assert shown_picks == {row: pick or "no answer" for row, pick in picks.items()}


#: Rows whose picks come from a fit: the golden compare fits on 8 questions, the lm_eval run above on 2.
FITTED = ("lover_", "ccs_", "pca_", "trained_", "supervised")


def test_a_compare_folder_views_with_compares_intervals_and_its_picks(golden_baseline, page, tmp_path):
    """The golden run's `lover compare` folder (two tasks, a trained checkpoint's rows, the supervised cross-fit): the
    page shows its rows and lover_sum's paired interval against majority exactly as compare wrote them, finds every
    question's branches in the bank by their token counts, and selects each row's pick again from them (its logs keep
    only 0/1): right exactly where compare scored the row right, and, for the rows that fit nothing, the picks
    lm-eval's filters made on the same questions."""
    folder, out = golden_baseline[1].parent / "compare", tmp_path / "compare.html"
    assert main(["view", str(folder), "--out", str(out)]) == 0
    data = page_data(out)
    report = json.loads((folder / "leaderboard.json").read_text())
    assert [task["name"] for task in data["tasks"]] == list(report["tasks"])
    for task in data["tasks"]:
        entry = report["tasks"][task["name"]]
        rows = {row["name"]: row for row in task["rows"]}
        assert {name: (row["acc"], row["low"], row["high"]) for name, row in rows.items()} == {
            name: (cell["acc"], cell["low"], cell["high"]) for name, cell in entry["rows"].items()}
        assert rows["lover_sum"]["paired"] == entry["paired"]["majority"]
        assert task["banked"] == len(task["questions"]) == 8 and {"trained", "supervised_cv"} <= set(task["scorers"])
        for question in task["questions"]:
            for name, pick, outcome in zip(rows, question["k"], question["o"]):
                if pick is not None:
                    assert (pick == question["g"]) == (outcome == "1"), (task["name"], question["d"], name)
            assert sum(pick is None for pick in question["k"]) <= (question["g"] is None)  # pass_at_n, gold unknown
    lm_eval = page_data(page)["tasks"][0]
    gsm8k = data["tasks"][0]
    for mine, theirs in zip(gsm8k["questions"], lm_eval["questions"]):  # doc_ids 0 and 1
        assert [b[0] for b in mine["b"]] == [b[0] for b in theirs["b"]]
        picks = lambda view, q: {row["name"]: pick for row, pick in zip(view["rows"], q["k"])  # noqa: E731
                                 if not row["name"].startswith(FITTED) and row["name"] != "pass_at_n"}
        assert picks(gsm8k, mine) == picks(lm_eval, theirs)
    if CHROMIUM is not None:
        dom = rendered(out, "#task=lover_bbh_web_of_lies&q=3")
        assert shown(dom) == (8, 8) and '<h3 id="qtitle" data-doc="3">' in dom


def test_intervals_are_lover_compares(tmp_path):
    """Each row's interval and its paired difference against majority are drawn as `lover compare` draws them
    (compare.interval_rows, Comparison.rng), on a hand-made table of 40 questions."""
    from lover_lmeval.apps.compare import Comparison, interval_rows
    from lover_lmeval.apps.view_page import TaskInput, row_data
    from lover_lmeval.core.stats import paired_bootstrap

    rng = np.random.default_rng(3)
    table = {name: rng.integers(0, 2, 40).astype(float) for name in ("majority", "cisc_t0.1", "lover_sum")}
    run = SimpleNamespace(settings=SimpleNamespace(seed=5, n_boot=400))
    run.rng = lambda *names: Comparison.rng(run, *names)
    theirs = interval_rows(run, "lover_gsm8k", table, {})
    task = TaskInput("lover_gsm8k", "number", "exact_match", list(range(40)), table, [None] * 40, {}, [None] * 40,
                     [None] * 40, [[] for _ in range(40)], [{} for _ in range(40)], {}, None)
    mine = {row["name"]: row for row in row_data(task, 400, 5)}
    for name, row in theirs.items():
        assert (mine[name]["acc"], mine[name]["low"], mine[name]["high"]) == (row["acc"], row["low"], row["high"])
    paired = paired_bootstrap(table["lover_sum"], table["majority"], 400, run.rng("lover_gsm8k", "lover_sum",
                                                                                   "majority"))
    assert mine["lover_sum"]["paired"] == paired and "paired" not in mine["majority"]
    assert mine["lover_sum"]["colour"] == {"above": "#2ca02c", "below": "#d62728", "holds": "#1f77b4"}[
        mine["lover_sum"]["verdict"]]


def test_without_a_bank_and_without_samples(banked_run, tmp_path):
    """A run without a bank (`--bank none` reads none) still shows every branch's text, answer and scores, only no
    tokens or margins; a folder without --log_samples is refused naming the flag."""
    out = tmp_path / "plain.html"
    assert main(["view", str(banked_run / "out"), "--bank", "none", "--out", str(out)]) == 0
    (task,) = page_data(out)["tasks"]
    assert task["banked"] == 0 and not any(row.startswith("cot_") for row in task["sortable"])
    branches = [b for q in task["questions"] for b in q["b"]]
    assert all(b[0] and b[3] is None and b[6] == "" and len(b[5]) == len(task["scorers"]) for b in branches)
    bare = tmp_path / "bare"
    bare.mkdir()
    (results,) = glob.glob(str(banked_run / "out" / "*" / "results_*.json"))
    shutil.copy(results, bare)
    with pytest.raises(SystemExit, match="--log_samples"):
        main(["view", str(bare)])


@needs_chromium
def test_a_full_gsm8k_sized_page_builds_only_the_visible_questions(banked_run, page, tmp_path):
    """The run's questions replicated to GSM8K's 1,319 test questions: the page opens with every one counted but only
    the visible ones' rows in the DOM, and says when its first screen was drawn."""
    from lover_lmeval.apps.view_page import render_html

    data = page_data(page)
    task = data["tasks"][0]
    task["questions"] = [{**task["questions"][d % LIMIT], "d": d} for d in range(1319)]
    big = tmp_path / "gsm8k_sized.html"
    big.write_text(render_html(data), encoding="utf-8")
    dom = rendered(big)
    assert shown(dom) == (1319, 1319)
    assert 0 < len(re.findall(r'<div class="qrow', dom)) < 60
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--enable-logging=stderr", "--v=0", "--window-size=1400,1000",
                           f"--screenshot={tmp_path / 'first.png'}", big.as_uri()], capture_output=True, text=True,
                          timeout=300)
    drawn = re.search(r"lover view: 1319 questions, first screen drawn at (\d+) ms", done.stderr)
    assert drawn, done.stderr[-3000:]
    print(f"GSM8K-sized page: {big.stat().st_size / 1e6:.1f} MB, first screen drawn at {drawn[1]} ms")
