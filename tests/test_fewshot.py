"""Few-shot exemplars of every lover task: `--num_fewshot K` shows K worked solutions, each ending in the answer
sentence its instruction asks for ("The answer is 72."), never a bare target ("Answer: 72", which models copy), and
never a question of the split being evaluated. Tasks are built by lm-eval's own TaskManager on ../shared/data and
rendered by its own `fewshot_context`, as `lm_eval --num_fewshot 2` renders them; one lm_eval CLI run on SmolLM2
closes."""

from __future__ import annotations

import json
import re

import pytest

import in_process
from lover_lmeval.core.select.answers import get_extractor
from lover_lmeval.data import fewshot
from lover_lmeval.data.tasks import load_mmlu_pro
from tests.test_tasks import DATA, EXPECTED, _task_manager

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# exemplars each family holds: K > this is refused with the count (test_more_shots_than_exemplars_...)
POOL = {"lover_gsm8k": 8, "lover_igsm": 8, "lover_bbh": 3, "lover_mmlu_pro": 3, "lover_hotpotqa_yesno": 4,
        "lover_math500": 4}
_NUMBER = r"-?\d+(?:\.\d+)?"


def _pool_size(name: str) -> int:
    return next(n for prefix, n in POOL.items() if name.startswith(prefix))


def answer_sentence(instruction: str) -> re.Pattern:
    """The sentence an exemplar must end with, read off the instruction line itself: its quoted alternatives
    ('finish with "The answer is Yes" or "The answer is No"'), a letter in parentheses ('"The answer is (X)" where X
    is the letter'), a boxed LaTeX answer ('"The answer is $\\boxed{ANSWER}$" where ANSWER is the final answer'), or a
    number ('"The answer is" followed by the final number'); then a period."""
    quoted = re.findall(r'"(The answer is[^"]*)"', instruction)
    if len(quoted) > 1:
        body = "|".join(map(re.escape, quoted))
    elif quoted == ["The answer is (X)"]:
        body = r"The answer is \([A-J]\)"
    elif quoted == ["The answer is $\\boxed{ANSWER}$"]:
        body = r"The answer is \$\\boxed\{.+\}\$"
    else:
        assert quoted == ["The answer is"] and "followed by the final number" in instruction, instruction
        body = rf"The answer is {_NUMBER}"
    return re.compile(rf"(?:^|\s)(?:{body})\.$")


def _check_exemplar(solution: str, target: str, ending: re.Pattern, extract: str) -> None:
    """A worked solution: some reasoning (10 words or more), then the answer sentence naming the exemplar's own
    target in the extractor's normal form (so the exemplar agrees with its gold answer as the metric reads it)."""
    match = ending.search(solution)
    assert match, solution[-120:]
    assert len(solution[: match.start()].split()) >= 10, solution
    assert get_extractor(extract)(solution).value == target, solution[-120:]


@pytest.fixture(scope="module")
def tasks():
    """Every lover leaf task, built once (offline data)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOVER_DATA_DIR", str(DATA))
        leaves = _task_manager().load(["lover_gsm8k", "lover_hotpotqa_yesno", "lover_igsm", "lover_mmlu_pro",
                                       "lover_bbh", "lover_math500"])["tasks"]
    assert set(leaves) == set(EXPECTED)
    return leaves


def _chat(messages, **_):
    return messages


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_two_shot_prompt_shows_two_worked_exemplars(tasks, name):
    """2-shot, as text and as chat turns (--apply_chat_template --fewshot_as_multiturn): two exemplars, each the
    task's own prompt for an exemplar question, answered by a worked solution ending in the answer sentence; the
    question asked is the zero-shot prompt unchanged; nowhere an "Answer: <bare target>"."""
    task, extract = tasks[name], EXPECTED[name][1]
    doc = task.test_docs()[0]
    zero = task.fewshot_context(doc, 0)
    ending = answer_sentence(zero.splitlines()[-2])
    shots = list(task.dataset["fewshot"])[:2]
    turns = task.fewshot_context(doc, 2, apply_chat_template=True, fewshot_as_multiturn=True, chat_template=_chat)
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant", "user"]
    assert turns[-1]["content"] == zero
    for shot, user, assistant in zip(shots, turns[0:4:2], turns[1:4:2]):
        assert user["content"] == task.doc_to_text(shot)
        assert assistant["content"] == shot["solution"]
        _check_exemplar(assistant["content"], shot["target"], ending, extract)
    text = task.fewshot_context(doc, 2)
    assert text == "".join(f"{t['content']} {a['content']}\n\n" for t, a in zip(turns[0:4:2], turns[1:4:2])) + zero
    assert not re.search(r"Answer: *\(?[\w.-]+\)?\.?\n", text), "a bare target as an exemplar's answer"
    single = task.fewshot_context(doc, 2, apply_chat_template=True, chat_template=_chat)  # no --fewshot_as_multiturn
    assert single == [{"role": "user", "content": text}]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_exemplar_is_a_worked_solution_from_outside_the_evaluated_split(tasks, name):
    """The whole pool, not only the first two: each a worked solution ending in the answer sentence of its task's
    instruction, none a question of the test split; GSM8K's and iGSM's are training questions, their calculator
    notes, "#### N" lines and the generator's "Thus, the answer is N." gone."""
    task, extract = tasks[name], EXPECTED[name][1]
    pool = list(task.dataset["fewshot"])
    assert len(pool) == _pool_size(name)
    ending = answer_sentence(task.doc_to_text(pool[0]).splitlines()[-2])
    for shot in pool:
        _check_exemplar(shot["solution"], shot["target"], ending, extract)
    questions = {shot["question"] for shot in pool}
    assert not questions & set(task.test_docs()["question"])
    if name == "lover_gsm8k" or name.startswith("lover_igsm"):  # drawn from the training split
        assert questions <= set(task.training_docs()["question"])
        assert not any(mark in shot["solution"] for shot in pool for mark in ("<<", "####", "Thus, the answer"))


def test_gsm8k_two_shot_prompt_by_hand(tasks):
    """By hand: GSM8K's exemplars are the first two questions of the training split (the fixed SPLIT_SEED shuffle of
    train.jsonl puts its rows 4531 and 6018 first). Row 4531's reference solution reads "Ella's score is 40 items -
    4 items = <<40-4=36>>36 items.\\n ... = <<18+6=24>>24 items.\\n#### 24": the <<...>> notes and the "#### 24"
    line go, "The answer is 24." closes it. lm-eval joins question and answer with " " (target_delimiter) and
    exemplars with a blank line; the test question (test.jsonl's first row, Janet's ducks) ends the prompt exactly
    as zero-shot."""
    instruction = "Let's think step by step, then finish with \"The answer is\" followed by the final number.\nAnswer:"
    expected = (
        "Question: The result from the 40-item Statistics exam Marion and Ella took already came out. Ella got 4 "
        "incorrect answers while Marion got 6 more than half the score of Ella. What is Marion's score?\n"
        f"{instruction} Ella's score is 40 items - 4 items = 36 items.\n"
        "Half of Ella's score is 36 items / 2 = 18 items.\n"
        "So, Marion's score is 18 items + 6 items = 24 items.\n"
        "The answer is 24.\n\n"
        "Question: Stephen made 10 round trips up and down a 40,000 foot tall mountain. If he reached 3/4 of the "
        "mountain's height on each of his trips, calculate the total distance he covered.\n"
        f"{instruction} Up a mountain, Stephen covered 3/4*40000 = 30000 feet.\n"
        "Coming down, Stephen covered another 30000 feet, making the total distance covered in one round to be "
        "30000+30000 = 60000.\n"
        "Since Stephen made 10 round trips up and down the mountain, he covered 10*60000 = 600000\n"
        "The answer is 600000.\n\n"
        "Question: Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins "
        "for her friends every day with four. She sells the remainder at the farmers' market daily for $2 per fresh "
        "duck egg. How much in dollars does she make every day at the farmers' market?\n"
        f"{instruction}")
    task = tasks["lover_gsm8k"]
    assert task.fewshot_context(task.test_docs()[0], 2) == expected


def test_more_shots_than_exemplars_is_refused_with_the_count(tasks, tmp_path, monkeypatch):
    """BBH has the paper's 3 exemplars; a data folder without bbh/cot-prompts still runs zero-shot, and refuses any
    shot by saying it has none and where they come from."""
    navigate = tasks["lover_bbh_navigate"]
    with pytest.raises(ValueError, match=r"--num_fewshot 4: this task has 3 few-shot exemplars"):
        navigate.fewshot_context(navigate.test_docs()[0], 4)
    (tmp_path / "bbh").mkdir()
    (tmp_path / "bbh" / "navigate.jsonl").write_text((DATA / "bbh" / "navigate.jsonl").read_text())
    monkeypatch.setenv("LOVER_DATA_DIR", str(tmp_path))
    bare = _task_manager().load(["lover_bbh_navigate"])["tasks"]["lover_bbh_navigate"]
    doc = bare.test_docs()[0]
    assert bare.fewshot_context(doc, 0) == navigate.fewshot_context(doc, 0)
    with pytest.raises(ValueError, match=r"has 0 few-shot exemplars.*bbh/cot-prompts"):
        bare.fewshot_context(doc, 1)


def test_mmlu_pro_uses_validation_cot_content_where_the_data_has_it(tmp_path, monkeypatch):
    """With mmlu_pro/validation.jsonl beside the test file (the hub's validation split has the same fields), the
    exemplars are that split's rows of the test category: "A: Let's think step by step. F = m * a = 2 * 3 = 6 N.
    The answer is (B)." -> "F = m * a = 2 * 3 = 6 N. The answer is (B).". The business row is another category."""
    row = {"question_id": 1, "options": ["3 N", "6 N", "9 N"], "answer": "B", "answer_index": 1, "src": "x"}
    test = [{**row, "question": "q physics", "category": "physics"},
            {**row, "question": "q biz", "category": "business"}]
    validation = [{**row, "question": "What force accelerates 2 kg at 3 m/s^2?", "category": "physics",
                   "cot_content": "A: Let's think step by step. F = m * a = 2 * 3 = 6 N. The answer is (B)."},
                  {**row, "question": "v biz", "category": "business", "cot_content": "A: Let's think. (B)"}]
    (tmp_path / "mmlu_pro").mkdir()
    for split, rows in (("test", test), ("validation", validation)):
        (tmp_path / "mmlu_pro" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("LOVER_DATA_DIR", str(tmp_path))
    (shot,) = load_mmlu_pro(category="physics")["fewshot"]
    assert shot == {"question": "What force accelerates 2 kg at 3 m/s^2?", "options": ["3 N", "6 N", "9 N"],
                    "target": "B", "solution": "F = m * a = 2 * 3 = 6 N. The answer is (B)."}
    # A cot_content without its closing sentence gets one, with the gold letter.
    assert fewshot.mmlu_pro_solution("A: Let's think step by step. It is 6 N.", "B") == "It is 6 N. The answer is (B)."


def test_bbh_prompt_file_in_another_form_is_refused():
    """An exemplar that does not close with "So the answer is X." would lose its answer sentence: refused."""
    text = "canary\n-----\nTask.\n\nQ: 1 + 1 =\nA: Let's think step by step.\n1 + 1 = 2. Hence 2.\n\nQ: 2 + 2 =\n" \
           "A: Let's think step by step.\n2 + 2 = 4. So the answer is 4."
    with pytest.raises(ValueError, match="holds 2 exemplars, but only 1"):
        fewshot.bbh_exemplars(text)


@pytest.mark.slow
def test_lm_eval_cli_two_shot_branches_follow_the_exemplars(tmp_path, smollm2_dir):
    """`lm_eval --num_fewshot 2 --apply_chat_template --fewshot_as_multiturn` on the embedded SmolLM2-135M, on
    HotpotQA yes/no (the shortest exemplars: 2 questions x 2 branches x at most 40 tokens keep it cheap): the logged
    prompt holds the two exemplars as assistant turns, and every branch answers in their form, closing with "The
    answer is yes." / "... no." and stopping there (end of turn, not the token limit); three of the four state facts
    first, as the exemplars do ("Scott Derrickson is a Canadian, while Ed Wood is a British actor. ... The answer is
    yes."), one is the bare sentence. The form, not correctness: the facts are wrong, and all four say yes (gold:
    yes, no)."""
    out = tmp_path / "out"
    in_process.lm_eval(["--model", "lover_hf", "--model_args", "n_branches=2,extract=yes_no", "--gen_kwargs",
                        "max_gen_toks=40", "--tasks", "lover_hotpotqa_yesno", "--num_fewshot", "2",
                        "--apply_chat_template", "--fewshot_as_multiturn", "--limit", "2", "--log_samples",
                        "--output_path", str(out)], tmp_path)
    shots = fewshot.HOTPOTQA_EXEMPLARS[:2]
    (path,) = out.glob("*/samples_lover_hotpotqa_yesno_*.jsonl")
    samples = {s["doc_id"]: s for s in map(json.loads, path.read_text().splitlines())}
    assert sorted(samples) == [0, 1]
    branches = []
    for sample in samples.values():
        prompt = sample["arguments"]["gen_args_0"]["arg_0"]
        assert all(f"<|im_start|>assistant\n{shot['solution']}<|im_end|>" in prompt for shot in shots)
        assert prompt.endswith("Answer:<|im_end|>\n<|im_start|>assistant\n")
        logged = sample["lover"]
        assert logged["finish"] == ["eos", "eos"], logged
        branches += logged["texts"]
    assert all(re.search(r"(?:^|\s)The answer is (?:yes|no)\.$", text) for text in branches), branches
    assert sum(len(text.split()) > 8 for text in branches) >= 3, branches
