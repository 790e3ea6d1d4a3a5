"""The lover_* lm-eval tasks in task_configs/: built through lm-eval's own TaskManager on the offline data
in ../shared/data (no hub, no model). Checks splits, prompts, normalised targets, the one extractor each
task's filters use, the groups and the error for a data folder without the files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from lover_lmeval.data import tasks as lover_tasks
from lover_lmeval.core.select.answers import get_extractor

REPO = Path(__file__).resolve().parents[1]
TASK_DIR = REPO / "task_configs"
DATA = Path(__file__).parents[1].parent / "shared" / "data"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # get_task_dict, as the brief's API

MMLU_PRO_TEST = {"computer_science": 410, "physics": 1299, "history": 381, "biology": 717}
BBH_TEST = {"boolean_expressions": 250, "web_of_lies": 250, "object_counting": 250, "navigate": 250,
            "multistep_arithmetic_two": 250, "causal_judgement": 187}
GROUPS = {
    "lover_igsm": [f"lover_igsm_op{op}" for op in (2, 4, 8, 16)],
    "lover_mmlu_pro": [f"lover_mmlu_pro_{c}" for c in MMLU_PRO_TEST],
    "lover_bbh": [f"lover_bbh_{name}" for name in BBH_TEST],
}
# task -> (split sizes, extractor its filters and targets use)
EXPECTED = {
    "lover_gsm8k": ({"train": 7000, "validation": 473, "test": 1319}, "number"),
    "lover_hotpotqa_yesno": ({"train": 535, "test": 458}, "yes_no"),
    **{f"lover_igsm_op{op}": ({"train": 1500, "test": 100}, "number") for op in (2, 4, 8, 16)},
    **{f"lover_mmlu_pro_{c}": ({"train": 12032 - 2807, "test": n}, "choice") for c, n in MMLU_PRO_TEST.items()},
    **{f"lover_bbh_{name}": ({"test": n}, lover_tasks.BBH_TASKS[name]) for name, n in BBH_TEST.items()},
    "lover_math500": ({"test": 500}, "math"),
}
SPLIT_ATTRS = {"train": "training", "validation": "validation", "test": "test"}


def _task_manager():
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(TASK_DIR), include_defaults=False)


@pytest.fixture(scope="module")
def loaded():
    """(leaf task name -> Task, group name -> child names) for every lover task, built once."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOVER_DATA_DIR", str(DATA))
        loaded = _task_manager().load(["lover_gsm8k", "lover_hotpotqa_yesno", "lover_math500", *GROUPS])
    return loaded["tasks"], {name: list(children) for name, children in loaded["group_map"].items()}


def _extractors(task) -> set[str]:
    return {step["extract"] for entry in task.config.filter_list for step in entry["filter"]
            if step.get("function") == "lover_select"}


def test_every_task_yaml_is_covered(loaded):
    """The lists above name every task and group defined in task_configs/ (so nothing goes untested)."""
    defined = set()
    for path in TASK_DIR.glob("lover_*.yaml"):
        cfg = yaml.safe_load(path.read_text().replace("!function", ""))  # tags are irrelevant here
        defined.add(cfg["group"] if "group" in cfg else cfg["task"])  # a group's `task` lists its children
    leaves, groups = loaded
    assert defined == set(EXPECTED) | set(GROUPS)
    assert set(leaves) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_splits_targets_and_extractor(loaded, name):
    task = loaded[0][name]
    sizes, extract = EXPECTED[name]
    for split, attr in SPLIT_ATTRS.items():
        has = getattr(task, f"has_{attr}_docs")()
        assert has == (split in sizes), (name, split)
        if has:
            assert len(getattr(task, f"{attr}_docs")()) == sizes[split], (name, split)

    # The filters name exactly one extractor, and it is the one the targets were normalised for.
    assert _extractors(task) == {extract}
    assert [entry["name"] for entry in task.config.filter_list][-1] == "pass_at_n"
    extractor = get_extractor(extract)
    for doc in task.test_docs():
        target = doc["target"]
        assert target and target == target.strip(), (name, doc)
        assert task.doc_to_target(doc) == target
        answer = extractor(f"Let's see. The answer is {target}.")
        assert answer is not None and answer.value == target, (name, target)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_prompt(loaded, name):
    """Zero-shot CoT prompt: the question, then the "The answer is" instruction; same text in a chat turn."""
    task = loaded[0][name]
    doc = task.test_docs()[0]
    text = task.doc_to_text(doc)
    assert doc["question"] in text
    assert text.startswith("Question: ") and text.endswith("\nAnswer:")
    assert '"The answer is' in text.splitlines()[-2]
    assert "{{" not in text and "{%" not in text
    if name.startswith("lover_mmlu_pro"):
        letters = "ABCDEFGHIJ"[: len(doc["options"])]
        lettered = [line[:3] for line in text.splitlines() if re.match(r"[A-J]\. ", line)]
        assert lettered == [f"{c}. " for c in letters]
        assert f"{letters[-1]}. {doc['options'][-1]}\n" in text
    if name.startswith("lover_igsm"):
        assert "modulo 23" in text
    # With --apply_chat_template the same text is the single user turn (no system prompt needed).
    chat = task.fewshot_context(doc, 0, apply_chat_template=True, chat_template=lambda messages, **_: messages)
    assert chat == [{"role": "user", "content": text}]
    assert task.fewshot_context(doc, 0) == text


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_generation_kwargs_keep_stop_sequences(loaded, name):
    """A task-level generation_kwargs replaces the base's whole dict: its stop sequences must survive."""
    kwargs = loaded[0][name].config.generation_kwargs
    base = yaml.safe_load((TASK_DIR / "_lover_base.yaml").read_text())["generation_kwargs"]
    assert kwargs["until"] == base["until"] and kwargs["do_sample"] is False
    budget = {"lover_igsm": 1024, "lover_mmlu_pro": 1024, "lover_bbh": 512, "lover_math500": 1024}
    expected = next((v for prefix, v in budget.items() if name.startswith(prefix)), base["max_gen_toks"])
    assert kwargs["max_gen_toks"] == expected


def test_groups_expand_to_subtasks(loaded):
    assert loaded[1] == GROUPS


def test_group_aggregates_exact_match_per_filter(loaded):
    """No filter_list in aggregate_metric_list: lm-eval 0.4.13 aggregates every filter it finds."""
    leaves = loaded[0]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOVER_DATA_DIR", str(DATA))
        group = _task_manager().load(["lover_bbh"])["groups"]["lover_bbh"]
    filters = [entry["name"] for entry in leaves["lover_bbh_navigate"].config.filter_list]
    metrics = {}
    for i, name in enumerate(GROUPS["lover_bbh"]):
        n = BBH_TEST[name.removeprefix("lover_bbh_")]
        metrics[name] = {"sample_len": n, **{f"exact_match,{f}": i / 10 for f in filters},
                         **{f"exact_match_stderr,{f}": 0.01 for f in filters}}
    result = group.aggregate(metrics)
    sizes = [BBH_TEST[name.removeprefix("lover_bbh_")] for name in GROUPS["lover_bbh"]]
    weighted = sum(i / 10 * n for i, n in enumerate(sizes)) / sum(sizes)
    for f in filters:
        assert result[f"exact_match,{f}"] == pytest.approx(weighted)
    assert result["sample_len"] == sum(sizes)


def test_igsm_train_and_test_are_disjoint_and_deterministic(loaded):
    leaves = loaded[0]
    test = leaves["lover_igsm_op8"].test_docs()
    train = leaves["lover_igsm_op8"].training_docs()
    assert not set(test["question"]) & set(train["question"])
    assert set(train["max_op"]) == {8} and set(train["seed"]) == {43} and set(test["seed"]) == {42}
    assert set(leaves["lover_igsm_op16"].test_docs()["max_op"]) == {16}
    from lover_lmeval.data.igsm import IGSMConfig, generate

    fresh = generate(IGSMConfig(max_op=2, seed=42, max_edge=12, perm_level=5, detail_level=0), 100)
    assert [p["question"] for p in fresh] == leaves["lover_igsm_op2"].test_docs()["question"]


def test_unlabeled_hotpotqa_train_and_mmlu_pro_split(loaded):
    leaves = loaded[0]
    assert set(leaves["lover_hotpotqa_yesno"].training_docs()["target"]) == {""}
    train_categories = set(leaves["lover_mmlu_pro_physics"].training_docs()["category"])
    assert len(train_categories) == 10 and not train_categories & set(lover_tasks.MMLU_PRO_TEST_CATEGORIES)
    assert set(leaves["lover_mmlu_pro_computer_science"].test_docs()["category"]) == {"computer science"}


@pytest.mark.parametrize("name", ["lover_gsm8k", "lover_hotpotqa_yesno", "lover_mmlu_pro_history",
                                  "lover_bbh_navigate", "lover_math500"])
@pytest.mark.parametrize("folder", ["empty", "missing"])
def test_data_dir_without_files_names_the_variable(tmp_path, monkeypatch, name, folder):
    monkeypatch.setenv("LOVER_DATA_DIR", str(tmp_path if folder == "empty" else tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="LOVER_DATA_DIR"):
        _task_manager().load([name])


def test_loader_arguments_are_checked(monkeypatch):
    monkeypatch.setenv("LOVER_DATA_DIR", str(DATA))
    with pytest.raises(ValueError, match="not a test category"):
        lover_tasks.load_mmlu_pro(category="math")
    with pytest.raises(ValueError, match="unknown BBH task"):
        lover_tasks.load_bbh(name="snarks")
    with pytest.raises(ValueError, match="not a well-formed"):
        lover_tasks.normalise_target("maybe", "yes_no")
