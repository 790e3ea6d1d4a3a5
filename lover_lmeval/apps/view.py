"""`lover view PATH`: one self-contained HTML file of a run, showing per question the N branches and why each selector
picked what it picked.

A run prints one number per selector; what a reader asks next (why did cisc_t0.1 beat majority here, which questions
did LoVer get wrong that the vote got right, did the fit run backwards, did the budget cut the branches) is spread over
lm-eval's logged samples, the results file's provenance and the branch bank. This command reads them where they
already are, so any run can be viewed without re-running or changing it:

- an `lm_eval --model lover_hf ... --log_samples --output_path DIR` folder: its newest `results_*.json` and the
  `samples_<task>_<same time>.jsonl` beside it (each sample's response is the LoverResult's JSON: every branch's text,
  finish reason and scores; each filter's pick and its metric), and the bank named by the run's `bank=` for each
  branch's tokens and CoT margins (a question's record is found by its branch texts: no tokenizer needed). Without a
  bank the page shows everything else.
- a `lover compare --out DIR` folder: leaderboard.json, per_question.jsonl and branches.jsonl, and the bank of its
  model_args for the texts (branches.jsonl keeps none; a record is found by its branches' token counts and finish
  reasons, then checked against their answers). Its logs keep each row's 0/1 but not its pick, which is selected
  again from the bank's branches with the logged scores (`compare_picks`), and no prompt.

view_page.py turns what is read here into the page's data and the HTML (view_page.html: styles and script); `run`
alone imports the core (torch, via core.stats), so `lover view --help` stays instant (tests/test_cli_help.py).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from .settings import CompareSettings

OUTPUT_NAME = "lover_view.html"


def add_arguments(parser) -> None:
    parser.add_argument("path", help="an lm_eval --output_path folder of a lover_hf run with --log_samples (or one "
                        "results_*.json in it), or a lover compare --out folder")
    parser.add_argument("--out", help=f"the HTML file to write (default: {OUTPUT_NAME} in the folder read)")
    parser.add_argument("--bank", help="the branch bank to read tokens and CoT margins from (default: the run's bank= "
                        "model_arg); 'none' reads no bank")
    parser.add_argument("--n_boot", type=int, default=CompareSettings.n_boot,
                        help="bootstrap resamples per interval (a compare folder: its own n_boot)")
    parser.add_argument("--seed", type=int, default=CompareSettings.seed,
                        help="seed of the bootstrap, as lover compare's --seed")


def model_args_of(model_args) -> dict:
    """model_args as a dict: lm-eval writes a dict into its results, `lover compare` the string it was given."""
    if isinstance(model_args, dict):
        return model_args
    pairs = (item.split("=", 1) for item in str(model_args or "").split(",") if "=" in item)
    return {key.strip(): value.strip() for key, value in pairs}


def model_label(model_args) -> str:
    """The model a run loaded, as model_args name it (lover_hf without pretrained= or gguf_file= loads its embedded
    SmolLM2-135M-Instruct)."""
    args = model_args_of(model_args)
    return args.get("pretrained") or args.get("gguf_file") or "the embedded SmolLM2-135M-Instruct"


def bank_path(override: str | None, model_args, near: Path) -> Path | None:
    """The bank to read: `--bank` ('none': none), else the run's bank= as given (absolute, or relative to where the run
    was started: tried from here and from the folders above the one read); None when there is none to be found."""
    if override is not None:
        if override.lower() == "none":
            return None
        if not Path(override).is_file():
            raise SystemExit(f"lover view: --bank {override} is not a file; pass the run's bank, or --bank none")
        return Path(override)
    named = model_args_of(model_args).get("bank")
    if not named:
        return None
    tried = [Path(named).expanduser(), *(folder / named for folder in [near, *near.parents])]
    found = next((path for path in tried if path.is_file()), None)
    if found is None:
        print(f"lover view: the run's bank {named} was not found; tokens and CoT margins are left out (--bank PATH)")
    return found


def lm_eval_files(path: Path) -> tuple[Path, dict[str, Path]]:
    """The newest results_*.json at or below `path` (or `path` itself) and, per task, its samples file (same time)."""
    found = [path] if path.is_file() else sorted(path.rglob("results_*.json"), key=lambda p: (p.stat().st_mtime, p))
    if not found:
        raise SystemExit(f"lover view: {path} holds neither an lm_eval output (results_*.json) nor a lover compare "
                         "folder (leaderboard.json)")
    results = found[-1]
    stamp = results.stem.removeprefix("results_")
    samples = {p.name[len("samples_"):-len(f"_{stamp}.jsonl")]: p
               for p in sorted(results.parent.glob(f"samples_*_{stamp}.jsonl"))}
    if not samples:
        raise SystemExit(f"lover view: {results} has no samples_<task>_{stamp}.jsonl beside it: run lm_eval with "
                         "--log_samples (each question's branches are read from them)")
    return results, samples


def read_samples(path: Path) -> list[dict]:
    """lm-eval's logged samples, one per filter and question. Each filter's sample repeats its question's response
    (all N branches' texts) and prompt: the copies are dropped as they are read, keeping one per question (a full
    GSM8K run's 29,018 samples hold 200 MB of such copies). A sample's lover evidence (harness/sample_log.py: the
    result's JSON, beside the texts the stock readers read) is taken as its response, as view reads it."""
    from ..harness.sample_log import EVIDENCE_KEY

    samples, first = [], {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                sample = json.loads(line)
                if EVIDENCE_KEY in sample:  # the result's JSON, as view reads it (a file before it was the resps)
                    sample["resps"] = [[json.dumps(sample.pop(EVIDENCE_KEY))]]
                kept = first.setdefault(sample["doc_id"], sample)
                sample["resps"], sample["arguments"] = kept["resps"], kept["arguments"]
                sample.pop("doc", None)
                samples.append(sample)
    return samples


def lm_eval_task(task: str, samples_file: Path, results: dict):
    """One task of an lm-eval run: its rows' 0/1 per question as its metric scored them (samples.table_from_samples),
    each filter's pick, the prompts and each question's logged LoverResult (texts, finish reasons, scores)."""
    from ..core.select.answers import get_extractor
    from ..harness.stock_rows import is_stock, task_from_config
    from .samples import TaskNotComparable, check_task, split_sampling_rows, table_from_samples
    from .view_page import TaskInput

    samples = read_samples(samples_file)
    fit = results.get("config", {}).get("lover", {}).get("test_time_fits", {}).get(task)
    try:  # the task rebuilt from the results file's config and read as `lover compare` reads it
        rebuilt = task_from_config(task, results.get("configs", {}).get(task, {}))
        user_extract = model_args_of(results.get("config", {}).get("model_args")).get("extract")
        reading = check_task(rebuilt, user_extract, tool="lover view")
    except TaskNotComparable as refusal:
        raise SystemExit(str(refusal)) from None
    except ValueError as error:
        raise SystemExit(f"lover view: {error}") from None
    # A stock task's branches are grouped as the run's fit grouped them (the extractor it names), else by the plan.
    extract = ((fit or {}).get("extract") or reading.extract) if is_stock(rebuilt) else reading.extract
    metric = reading.metric
    try:
        table, logged, gold, ids = table_from_samples(samples, get_extractor(extract), metric, reading.gold_extract,
                                                      reading.normalise)
        logged = [json.loads(text) for text in logged]
        sampling = results.get("config", {}).get("lover", {}).get("sampling_rows", {}).get(task, [])
        references = split_sampling_rows(table, sampling, reading.prefix)
    except TaskNotComparable as refusal:
        raise SystemExit(f"lover view: {refusal}") from None
    except (TypeError, json.JSONDecodeError):
        raise SystemExit(f"lover view: {samples_file}'s responses are not lover_hf's (each must be a LoverResult's "
                         "JSON: its branches' texts and scores); run lm_eval with --model lover_hf") from None
    picks, prompts = {}, {}
    for sample in samples:
        if sample["filter"] in sampling:  # each branch's response: a reference's, not a pick
            continue
        pick = sample["filtered_resps"][0]  # one request a question; [pick] when lover_select ends the chain
        picks.setdefault(sample["filter"], {})[sample["doc_id"]] = pick[0] if isinstance(pick, list) else pick
        prompts[sample["doc_id"]] = sample["arguments"]["gen_args_0"]["arg_0"]
    metrics = results.get("results", {}).get(task, {})
    return TaskInput(name=task, extract=extract, metric=metric, doc_ids=ids, table=table, gold=gold,
                     picks={row: [by_doc.get(d) for d in ids] for row, by_doc in picks.items()},
                     prompts=[prompts[d] for d in ids], texts=[entry["texts"] for entry in logged],
                     finish=[entry["finish"] for entry in logged], scores=[entry.get("scores", {}) for entry in logged],
                     reported={row: metrics[f"{metric},{row}"] for row in table if f"{metric},{row}" in metrics},
                     fit=fit, references=references)


def read_lm_eval(path: Path, args) -> dict:
    """The page's data from an lm-eval output folder (module docstring)."""
    from .view_page import bank_branches, page_data

    results_file, samples_files = lm_eval_files(path)
    results = json.loads(results_file.read_text())
    config = results.get("config", {})
    provenance = config.get("lover", {})
    inputs = [lm_eval_task(task, samples_file, results) for task, samples_file in samples_files.items()]
    bank = bank_path(args.bank, config.get("model_args"), results_file.parent)
    wanted = {tuple(texts) for task in inputs for texts in task.texts}
    banked = bank_branches(bank, wanted, lambda branches: tuple(b.text for b in branches)) if bank else {}
    for task in inputs:
        task.branches = [banked.get(tuple(texts)) for texts in task.texts]
    date, decoding = results.get("date"), provenance.get("decoding")
    facts = {"source": str(results_file), "model": f"{config.get('model')}: {model_label(config.get('model_args'))}",
             "model_args": config.get("model_args"), "bank": str(bank) if bank else None,
             "n_branches": decoding.get("n_branches") if isinstance(decoding, dict) else None, "decoding": decoding,
             "gen_kwargs": config.get("gen_kwargs"), "limit": config.get("limit"),
             "chat_template": bool(results.get("chat_template")), "n-shot": results.get("n-shot"),
             "layer": provenance.get("layer"), "dtype": provenance.get("dtype"), "engine": provenance.get("engine"),
             "world_size": provenance.get("world_size"), "plugin_version": provenance.get("plugin_version"),
             "lm_eval_version": results.get("lm_eval_version"),
             "date": datetime.fromtimestamp(date).isoformat(timespec="seconds") if isinstance(date, (int, float))
             else date, "checkpoints": provenance.get("checkpoints")}
    return page_data("lm_eval", facts, provenance, inputs, args.n_boot, args.seed)


class _Scored:
    """A question as selection.select reads it: branches, and each scorer's p_i (`LoverResult.scores`)."""

    def __init__(self, branches: list, scores: dict[str, list[float]]):
        self.branches, self._scores = branches, scores

    def scores(self, name: str):
        import numpy as np

        return np.asarray(self._scores[name], dtype=np.float64)


def row_strategy(row: str, scorers) -> tuple[str, str] | None:
    """(strategy, verifier) that makes a row's pick: a strategy by its name (lover_* with LoVer's scores), another
    verifier's rows (supervised_cv_sum, trained_max) as lover_* with that verifier's scores."""
    from ..core.select.selection import STRATEGIES
    from .view_page import row_scorer, untagged

    if untagged(row) in STRATEGIES:
        return untagged(row), "lover"
    found = row_scorer(row, scorers)
    return (f"lover_{found[1]}", found[0]) if found else None


def compare_picks(task) -> None:
    """A compare folder's picks, selected again from the bank's branches with the logged scores (the bank's branches
    checked against the logged answers first), as compare selected them; unknown where the bank had no record, or
    the folder lacks what a row reads (pass_at_n where no branch is right: the folder does not say which answer is)."""
    from ..core.select.answers import get_extractor, stated_answers
    from ..core.select.selection import select

    extract = get_extractor(task.extract)
    task.picks = {row: [None] * len(task.doc_ids) for row in task.table}
    for q, branches in enumerate(task.branches):
        if branches is None or [a.value if a else None for a in stated_answers(extract, branches)] != task.answers[q]:
            task.branches[q] = None
            continue
        task.texts[q] = [b.text for b in branches]
        question = _Scored(branches, task.scores[q])
        for row in task.table:
            found = row_strategy(row, task.scores[q])
            try:
                task.picks[row][q] = None if found is None else select(question, found[0], extract, task.gold[q],
                                                                       found[1])
            except (KeyError, ValueError):
                pass


def read_compare(folder: Path, args) -> dict:
    """The page's data from a `lover compare` output folder (module docstring)."""
    import numpy as np

    from .view_page import TaskInput, bank_branches, page_data

    report = json.loads((folder / "leaderboard.json").read_text())
    lines = [json.loads(line) for name in ("per_question.jsonl", "branches.jsonl")
             for line in (folder / name).read_text().splitlines() if line.strip()]
    outcomes = [line for line in lines if "branch" not in line]
    branch_lines = [line for line in lines if "branch" in line]
    fixed = {"task", "doc_id", "branch", "answer", "right", "finish", "tokens", "confidence"}
    inputs = []
    for task, entry in report["tasks"].items():
        ids = sorted(line["doc_id"] for line in outcomes if line["task"] == task)
        rows = list(entry["rows"])
        per_doc = {line["doc_id"]: line for line in outcomes if line["task"] == task}
        by_doc: dict[int, list[dict]] = {}
        for line in sorted((b for b in branch_lines if b["task"] == task), key=lambda b: b["branch"]):
            by_doc.setdefault(line["doc_id"], []).append(line)
        table = {row: np.array([float(per_doc[d][row]) for d in ids]) for row in rows}
        records = [by_doc.get(d, []) for d in ids]
        gold = [next((b["answer"] for b in branches if b["right"]), None) for branches in records]
        inputs.append(TaskInput(
            name=task, extract=entry["extract"], metric=entry["metric"], doc_ids=ids, table=table, gold=gold,
            picks={}, prompts=[None] * len(ids), texts=[None] * len(ids),
            finish=[[b["finish"] for b in branches] for branches in records],
            scores=[{name: [b[name] for b in branches] for name in branches[0] if name not in fixed}
                    if branches else {} for branches in records],
            reported={row: cell["acc"] for row, cell in entry["rows"].items()}, fit=entry.get("fit_checks"),
            intervals={row: (cell["low"], cell["high"]) for row, cell in entry["rows"].items()},
            answers=[[b["answer"] for b in branches] for branches in records],
            tokens=[[b["tokens"] for b in branches] for branches in records],
            confidence=[[b["confidence"] for b in branches] for branches in records], one_answer=entry["rows"]))
    bank = bank_path(args.bank, report.get("model_args"), folder)
    signature = lambda branches: tuple((len(b.token_ids), b.finish_reason) for b in branches)  # noqa: E731
    wanted = {tuple(zip(tokens, finish)) for task in inputs for tokens, finish in zip(task.tokens, task.finish)}
    banked = bank_branches(bank, wanted, signature) if bank else {}
    for task in inputs:
        task.branches = [banked.get(tuple(zip(tokens, finish))) for tokens, finish in zip(task.tokens, task.finish)]
        compare_picks(task)
    facts = {"source": str(folder), "model": f"lover_hf: {model_label(report.get('model_args'))}",
             "model_args": report.get("model_args"), "identity": report.get("identity"),
             "bank": str(bank) if bank else None, "limit": report.get("limit"), "n_boot": report.get("n_boot"),
             "verifiers": report.get("verifiers")}
    return page_data("compare", facts, {k: v for k, v in report.items() if k != "tasks"}, inputs,
                     report.get("n_boot") or args.n_boot, args.seed)


def run(args) -> int:
    from .view_page import render_html  # the page's module: its data imports the core (torch, via core.stats)
    from ..core.files import write_text

    path = Path(args.path)
    if not path.exists():
        raise SystemExit(f"lover view: {path} does not exist")
    compare_folder = path.is_dir() and (path / "leaderboard.json").is_file()
    data = read_compare(path, args) if compare_folder else read_lm_eval(path, args)
    out = Path(args.out) if args.out else (path if path.is_dir() else path.parent) / OUTPUT_NAME
    write_text(out, render_html(data))
    print(out)
    return 0
