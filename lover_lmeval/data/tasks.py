"""Datasets behind the task YAMLs in lover_lmeval/task_configs/ (called through lm-eval's `custom_dataset`).

With `LOVER_DATA_DIR` set, files are read from that folder in the layout of `../shared/data` (see its
README); without it, from the public hub datasets. Every loader returns a `datasets.DatasetDict` whose
docs carry a normalised `target` (what `exact_match` compares against) next to the original fields.
Splits follow the LoVer paper (appendix B). One loader per dataset family; the YAMLs pick a member
through `dataset_kwargs` (lm-eval calls `custom_dataset(**metadata, **dataset_kwargs)`). Every loader also
returns a `fewshot` split: the `--num_fewshot` exemplars, worked solutions in a `solution` field (fewshot.py).
"""

from __future__ import annotations

import functools
import json
import os
import random
from pathlib import Path

import datasets

from ..core.select.answers import get_extractor, normalise_number
from . import fewshot
from .igsm import IGSMConfig, generate

DATA_ENV = "LOVER_DATA_DIR"
# Fixed shuffle for the paper's train/validation cut of GSM8K's train file (and HotpotQA's hub train subset).
SPLIT_SEED = 0

# iGSM as in the paper: problem shape shared by both splits, test per max_op, train at max_op 8.
IGSM_SHAPE = {"max_edge": 12, "perm_level": 5, "detail_level": 0}
IGSM_TEST_SEED, IGSM_TEST_SIZE = 42, 100
IGSM_TRAIN_SEED, IGSM_TRAIN_SIZE, IGSM_TRAIN_MAX_OP = 43, 1500, 8
# MMLU-Pro: these four categories are the test sets; the other ten categories are the training set.
MMLU_PRO_TEST_CATEGORIES = ("computer science", "physics", "history", "biology")
HOTPOTQA_HUB_TRAIN_SIZE = 3000  # the paper's count of yes/no training questions
# Answer type of each BIG-Bench Hard task: the extractor (answers.py) whose normal form its targets take.
# Its YAML names the same extractor in its filters; tests/test_tasks.py checks that the two agree.
BBH_TASKS = {
    "boolean_expressions": "true_false",
    "web_of_lies": "yes_no",
    "object_counting": "number",
    "navigate": "yes_no",
    "multistep_arithmetic_two": "number",
    "causal_judgement": "yes_no",
}


def data_dir() -> Path | None:
    value = os.environ.get(DATA_ENV)
    return Path(value).expanduser().resolve() if value else None


def read_jsonl(relative: str) -> list[dict]:
    """Rows of `$LOVER_DATA_DIR/relative`; a clear error says which variable or file is missing."""
    root = data_dir()
    path = root / relative
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: set {DATA_ENV} to a folder laid out like ../shared/data "
            f"(it must contain {relative}), or unset it to use the public hub datasets."
        )
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _dataset_dict(splits: dict[str, list[dict]]):
    return datasets.DatasetDict({name: datasets.Dataset.from_list(list(rows)) for name, rows in splits.items()})


def _rows(relative: str, hub_path: str, hub_name: str | None = None, split: str = "test") -> list[dict]:
    """Rows of `$LOVER_DATA_DIR/relative` when the variable is set, else of a hub dataset's split."""
    if data_dir() is not None:
        return read_jsonl(relative)
    try:
        return list(datasets.load_dataset(hub_path, hub_name, split=split))
    except ConnectionError as error:  # offline, or the hub unreachable: name both ways to the data
        raise ConnectionError(
            f"{error}. Either let `datasets` reach the Hugging Face hub ({hub_path}; unset HF_DATASETS_OFFLINE), "
            f"or set {DATA_ENV} to a local folder laid out like ../shared/data (with {relative})."
        ) from None


def normalise_target(gold: str, extract: str) -> str:
    """`gold` in the normal form that extractor `extract` gives answers ("Yes" -> "yes", "-50" -> "-50",
    "C" -> "C"): the extractor itself reads it from "The answer is <gold>.", so a correct extracted answer
    equals the target under exact_match by construction."""
    answer = get_extractor(extract)(f"The answer is {gold}.")
    if answer is None:
        raise ValueError(f"gold answer {gold!r} is not a well-formed {extract!r} answer")
    return answer.value


def _gsm8k_doc(row: dict) -> dict:
    gold = row["answer"].split("####")[-1].strip()
    return {"question": row["question"], "answer": row["answer"], "target": normalise_number(gold) or gold}


def _exemplar(question: str, solution: str, target: str, **extra) -> dict:
    return {"question": question, **extra, "target": target, "solution": solution}


def load_gsm8k(**_):
    """train 7000 / validation 473 (a fixed shuffle of the 7473 train questions) / test 1319; fewshot = the
    first fewshot.FEWSHOT_POOL train questions with their reference solutions."""
    train = _rows("gsm8k/train.jsonl", "openai/gsm8k", "main", split="train")
    test = _rows("gsm8k/test.jsonl", "openai/gsm8k", "main", split="test")
    order = list(range(len(train)))
    random.Random(SPLIT_SEED).shuffle(order)
    train_docs = [_gsm8k_doc(train[i]) for i in order]
    shots = [_exemplar(d["question"], fewshot.gsm8k_solution(d["answer"], d["target"]), d["target"])
             for d in train_docs[:fewshot.FEWSHOT_POOL]]
    return _dataset_dict({"train": train_docs[:7000], "validation": train_docs[7000:],
                          "test": [_gsm8k_doc(r) for r in test], "fewshot": shots})


@functools.lru_cache(maxsize=8)
def _igsm_docs(max_op: int, seed: int, n: int) -> tuple[dict, ...]:
    problems = generate(IGSMConfig(max_op=max_op, seed=seed, **IGSM_SHAPE), n)
    return tuple({**p, "target": normalise_target(p["answer"], "number")} for p in problems)


def load_igsm(max_op: int, **_):
    """iGSM problems generated on the fly (no files; deterministic): test = 100 problems at `max_op`
    (seed 42), train = 1500 problems at max_op 8 (seed 43); all with max_edge 12, perm_level 5,
    detail_level 0. Train deliberately uses another seed than test: problem i depends only on
    (seed, max_op, i), so with seed 42 the max_op=8 test set would be the first 100 training problems.
    Docs are the generator's records (question, solution, answer, n_op, ...) plus `target`; fewshot = the first
    fewshot.FEWSHOT_POOL training problems with the generator's solutions."""
    train = _igsm_docs(IGSM_TRAIN_MAX_OP, IGSM_TRAIN_SEED, IGSM_TRAIN_SIZE)
    shots = [_exemplar(d["question"], fewshot.igsm_solution(d["solution"], d["target"]), d["target"])
             for d in train[:fewshot.FEWSHOT_POOL]]
    return _dataset_dict({"train": train, "test": _igsm_docs(int(max_op), IGSM_TEST_SEED, IGSM_TEST_SIZE),
                          "fewshot": shots})


def load_hotpotqa_yesno(**_):
    """Closed-book HotpotQA yes/no questions (no passages are given to the model).

    test: the 458 yes/no questions of the distractor dev set. train: unlabeled, every `target` is "":
    LoVer fits its verifier without labels, and the paper's 3000 labelled yes/no training questions are
    not available offline. Locally train is the 535 yes/no-like test-split questions of
    hotpotqa/unlabeled_yesno_like.jsonl; from the hub, 3000 yes/no questions of the train split (fixed
    shuffle) with their labels dropped, so that both sources train the same, unsupervised way.
    fewshot: fewshot.HOTPOTQA_EXEMPLARS (no labelled question outside the test split is available offline).
    """
    if data_dir() is None:
        hub = datasets.load_dataset("hotpotqa/hotpot_qa", "distractor")
        yes_no = {split: [r for r in hub[split].select_columns(["question", "answer", "type"])
                          if r["answer"] in ("yes", "no")] for split in ("train", "validation")}
        test, train = yes_no["validation"], yes_no["train"]
        random.Random(SPLIT_SEED).shuffle(train)
        train = train[:HOTPOTQA_HUB_TRAIN_SIZE]
    else:
        test, train = read_jsonl("hotpotqa/dev_yesno.jsonl"), read_jsonl("hotpotqa/unlabeled_yesno_like.jsonl")
    return _dataset_dict({
        "train": [{"question": r["question"], "target": ""} for r in train],
        "test": [{"question": r["question"], "answer": r["answer"], "type": r["type"],
                  "target": normalise_target(r["answer"], "yes_no")} for r in test],
        "fewshot": [_exemplar(e["question"], e["solution"], normalise_target(e["answer"], "yes_no"))
                    for e in fewshot.HOTPOTQA_EXEMPLARS],
    })


def load_mmlu_pro(category: str, **_):
    """MMLU-Pro, paper split: test = the rows of `category` (one of MMLU_PRO_TEST_CATEGORIES), train = the
    rows of the ten other categories (the same 9225 rows for every test category). `target` = the letter.
    fewshot: the validation rows of `category` with their `cot_content` where the data has them (the hub, or
    $LOVER_DATA_DIR/mmlu_pro/validation.jsonl), else fewshot.MMLU_PRO_EXEMPLARS."""
    if category not in MMLU_PRO_TEST_CATEGORIES:
        raise ValueError(f"MMLU-Pro category {category!r} is not a test category; use one of "
                         f"{MMLU_PRO_TEST_CATEGORIES} (the other categories form the training set)")
    fields = ("question_id", "question", "options", "answer", "answer_index", "category", "src")
    docs = [{**{k: r[k] for k in fields}, "target": normalise_target(r["answer"], "choice")}
            for r in _rows("mmlu_pro/test.jsonl", "TIGER-Lab/MMLU-Pro")]
    return _dataset_dict({"train": [d for d in docs if d["category"] not in MMLU_PRO_TEST_CATEGORIES],
                          "test": [d for d in docs if d["category"] == category],
                          "fewshot": _mmlu_pro_exemplars(category)})


def _mmlu_pro_exemplars(category: str) -> list[dict]:
    root = data_dir()
    if root is not None and not (root / "mmlu_pro/validation.jsonl").is_file():  # the offline test file has no CoT
        shots = [(e["question"], e["options"], e["solution"], e["answer"]) for e in fewshot.MMLU_PRO_EXEMPLARS]
    else:
        shots = [(r["question"], r["options"], fewshot.mmlu_pro_solution(r["cot_content"], r["answer"]), r["answer"])
                 for r in _rows("mmlu_pro/validation.jsonl", "TIGER-Lab/MMLU-Pro", split="validation")
                 if r["category"] == category]
    return [_exemplar(question, solution, normalise_target(letter, "choice"), options=list(options))
            for question, options, solution, letter in shots]


def load_math500(**_):
    """MATH-500 (the 500 MATH test problems of Lightman et al. 2023), test split only: no MATH training problem is
    available offline, and LoVer fits at test time. `question` is the problem, `target` its gold `answer` in the math
    extractor's form (the LaTeX as written, spaces collapsed); scored by math-verify's equivalence (lover_match).
    fewshot: fewshot.MINERVA_EXEMPLARS, the four worked MATH training solutions lm-eval's minerva_math uses."""
    rows = _rows("math500/test.jsonl", "HuggingFaceH4/MATH-500")
    fields = ("problem", "solution", "answer", "subject", "level", "unique_id")
    shots = [(e["question"], *fewshot.math_solution(e["solution"])) for e in fewshot.MINERVA_EXEMPLARS]
    return _dataset_dict({
        "test": [{"question": r["problem"], **{k: r[k] for k in fields},
                  "target": normalise_target(r["answer"], "math")} for r in rows],
        "fewshot": [_exemplar(question, solution, normalise_target(answer, "math"))
                    for question, solution, answer in shots]})


def load_bbh(name: str, **_):
    """A BIG-Bench Hard task (one of BBH_TASKS), test split only: BBH is out-of-distribution evaluation
    for a verifier trained on another task. `question` is the input without a leading "Question: ".
    fewshot: the paper's 3 chain-of-thought exemplars ($LOVER_DATA_DIR/bbh/cot-prompts/<name>.txt); empty
    without that file (from the hub, or an older data folder), which only few-shot runs need."""
    if name not in BBH_TASKS:
        raise ValueError(f"unknown BBH task {name!r}; use one of {sorted(BBH_TASKS)}")
    rows = _rows(f"bbh/{name}.jsonl", "lukaemon/bbh", name)
    prompts = data_dir() / fewshot.BBH_COT_DIR / f"{name}.txt" if data_dir() is not None else None
    shots = fewshot.bbh_exemplars(prompts.read_text(encoding="utf-8")) if prompts and prompts.is_file() else []
    return _dataset_dict({"test": [
        {"question": r["input"].removeprefix("Question: "), "input": r["input"], "answer": r["target"],
         "target": normalise_target(r["target"], BBH_TASKS[name])} for r in rows],
        "fewshot": [_exemplar(e["question"], e["solution"], normalise_target(e["answer"], BBH_TASKS[name]))
                    for e in shots]})
