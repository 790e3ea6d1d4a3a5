"""`extract=math` (core/select/math_answers.py): LaTeX answers read where the instruction asks for them, grouped by
math-verify's equivalence in an order-independent way, each math-verify call bounded in time in any thread, and
`lover_match` / `pass_at_n` scoring against the gold answer by the same equivalence."""

from __future__ import annotations

import itertools
import sys
import threading
import time

import pytest

from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.select.answers import (EXACT, Answer, Equivalence, equivalence_of, get_extractor,
                                              grouped_values, matches_gold, stated_answers)
from lover_lmeval.core.select.math_answers import MATH, extract_math
from lover_lmeval.core.select.math_equivalence import MathWorker
from lover_lmeval.core.select.selection import select
from lover_lmeval.harness.metric import lover_match


@pytest.mark.parametrize("text, value, span", [
    # the last closed box, whatever follows it
    (r"so $x = \boxed{\frac{14}{3}}$.", r"\frac{14}{3}", (15, 27)),
    (r"First \boxed{2}, then \boxed{3\sqrt{13}} is it.", r"3\sqrt{13}", (29, 39)),
    (r"Thus $\boxed{\left( 3, \frac{\pi}{2} \right)}$", r"\left( 3, \frac{\pi}{2} \right)", (13, 44)),
    (r"\boxed{ 10\text{ cm} }", r"10\text{ cm}", (8, 20)),
    (r"\boxed{[2,5)}. The answer is 7.", "[2,5)", (7, 12)),  # a box beats a later answer sentence
    (r"\fbox{p - q}", "p - q", (6, 11)),
    (r"\boxed{\{1, 2\}}", r"\{1, 2\}", (7, 15)),  # escaped braces inside the box
    (r"\boxed{\frac{1}{2}} and then \boxed{\frac{1}{", r"\frac{1}{2}", (7, 18)),  # the last box is cut: not read
    # without a box, the last answer sentence, its math delimiters dropped
    ("Final Answer: The final answer is $24$. I hope it is correct.", "24", (35, 37)),
    (r"The answer is \(90^\circ\).", r"90^\circ", (16, 24)),
    (r"The answer is -\dfrac{2}{3}.", r"-\dfrac{2}{3}", (14, 27)),
    ("The answer is 5 apples.", "5", (14, 15)),  # cut before the first word of prose
    ("The answer is  p -  q .\nDone", "p - q", (15, 21)),  # spaces collapsed in the value, the span as written
])
def test_math_reads_the_last_box_else_the_answer_sentence(text, value, span):
    answer = extract_math(text)
    assert answer == Answer(value, *span) and answer.marked
    assert " ".join(text[answer.start:answer.end].split()) == value


@pytest.mark.parametrize("text", [
    "I am not sure.",  # no box, no answer sentence
    r"\boxed{}",  # an empty box
    r"so \boxed{\frac{1}{",  # a box the budget cut
    r"\boxed{)(}",  # math-verify parses nothing from it
    "The answer is therefore unclear.",  # an answer sentence with prose only
])
def test_math_reads_no_answer(text):
    assert extract_math(text) is None


def test_math_is_registered_with_its_equivalence_and_the_others_are_exact():
    assert get_extractor("math") is extract_math and equivalence_of(extract_math) is MATH
    assert all(equivalence_of(get_extractor(name)) is EXACT for name in ("number", "choice", "yes_no", "true_false"))
    assert equivalence_of(lambda text: None) is EXACT  # a caller's own extractor groups equal strings


@pytest.mark.parametrize("a, b", [
    (r"\frac{14}{3}", r"\dfrac{14}{3}"), (r"\frac{14}{3}", "14/3"), (r"\frac{14}{3}", r"4\frac{2}{3}"),
    (r"\frac12", "0.5"), (r"\dfrac12", "0.5"),  # fractions, \dfrac, decimals
    (r"3\sqrt{13}", r"\sqrt{117}"),  # radicals
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \pi/2)"), ("[2,5)", "[2, 5)"),  # tuples, intervals
    (r"x \in [-2,7]", "[-2,7]"), (r"\{1,2,3\}", "1,2,3"),
    (r"90^\circ", "90"), (r"10\text{ cm}", "10"), (r"\$32,\!348", "32348"), (r"\text{(C)}", "C"),  # units, text
    (r"-\frac{2}{3}", r"\frac{-2}{3}"), ("p - q", "-q + p"),  # signs
])
def test_equivalent_answers_are_one(a, b):
    assert MATH.same(a, b) and MATH.same(b, a)
    assert matches_gold(extract_math, b, a) and lover_match([a], [b], extract="math") == {"lover_match": 1.0}


@pytest.mark.parametrize("a, b", [
    (r"\frac{14}{3}", r"\frac{13}{3}"), (r"\frac{14}{3}", "4.6667"),  # wrong, and a rounding short of 6 digits
    (r"-\frac{2}{3}", r"\frac{2}{3}"), ("p - q", "q - p"),  # the sign
    ("[2,5)", "(2,5)"), (r"\left( 3, \frac{\pi}{2} \right)", r"\left( 3, \pi \right)"),
])
def test_different_answers_stay_apart(a, b):
    assert not MATH.same(a, b) and not matches_gold(extract_math, b, a)
    assert lover_match([a], [b], extract="math") == {"lover_match": 0.0}


def test_lover_match_reads_the_gold_answer_as_the_task_does():
    """The target is read from "The answer is <gold>." (data/tasks.normalise_target); a pick of "" (no answer) is
    wrong, and a gold the extractor cannot read is compared as text."""
    assert lover_match([r"\left( 3, \frac{\pi}{2} \right)"], [["(3,\\frac{\\pi}{2})"]], extract="math")["lover_match"]
    assert lover_match([r"\frac{1}{2}"], [""], extract="math") == {"lover_match": 0.0}
    assert lover_match([")("], [")("], extract="math") == {"lover_match": 1.0}


GROUPED = [r"\frac{1}{2}", "0.5", None, r"\dfrac12", r"\frac{1}{3}", "1/3", r"\frac{13}{3}"]


def test_groups_and_their_representatives():
    """By hand: {\\frac{1}{2}, 0.5, \\dfrac12} is one answer, represented by its shortest value "0.5"; {\\frac{1}{3},
    1/3} by "1/3"; \\frac{13}{3} alone; None (no answer) stays None."""
    assert grouped_values(GROUPED, MATH) == ["0.5", "0.5", None, "0.5", "1/3", "1/3", r"\frac{13}{3}"]
    assert grouped_values(GROUPED) == GROUPED  # EXACT: the values themselves


def test_groups_do_not_depend_on_the_order_of_the_branches():
    """Every permutation of five answers (three of one value, two of another) gives each answer the same
    representative."""
    values = [r"\frac{1}{2}", r"\frac{1}{3}", "0.5", "1/3", r"\dfrac12"]
    expected = dict(zip(values, grouped_values(values, MATH)))
    for order in itertools.permutations(values):
        assert grouped_values(list(order), MATH) == [expected[v] for v in order]


def test_a_non_transitive_equivalence_groups_by_connected_components():
    """Integers within 1 of each other: 1 ~ 2 and 2 ~ 3, but 1 !~ 3. Connected components put 1, 2, 3 in one group
    (represented by "1") and 5 alone, in every order; a rule that joined each answer to the first group whose first
    member it matched would split {1, 3} from 2 when 3 and 1 came first."""
    near = Equivalence(same=lambda a, b: abs(int(a) - int(b)) <= 1, is_gold=lambda value, gold: value == gold)
    for order in itertools.permutations(["1", "2", "3", "5"]):
        assert grouped_values(list(order), near) == ["5" if v == "5" else "1" for v in order]


def test_math_verify_is_not_transitive_and_the_groups_close_over_it():
    """math-verify: "x = 2" ~ "2" (an assignment's value) and "2" ~ "y = 2", but "x = 2" !~ "y = 2" (another variable).
    One group in every order of the three, represented by its shortest value, "2"."""
    assert MATH.same("x = 2", "2") and MATH.same("2", "y = 2") and not MATH.same("x = 2", "y = 2")
    for order in itertools.permutations(["x = 2", "y = 2", "2"]):
        assert grouped_values(list(order), MATH) == ["2", "2", "2"]


def _branches(*texts: str) -> list[Branch]:
    return [Branch(text, [], [], [], "eos") for text in texts]


MATH_BRANCHES = _branches(r"So \boxed{\frac{1}{3}}.", r"\boxed{\dfrac12}", r"\boxed{0.5}", "no idea",
                          r"The answer is $\frac{1}{2}$.", r"\boxed{1/3}")


def test_every_row_reads_the_grouped_answers():
    """Stated answers take their group's representative; majority counts {\\dfrac12, 0.5, \\frac{1}{2}} as 3 votes
    against {\\frac{1}{3}, 1/3}'s 2 (each a different string: by strings, every group would hold one or two); greedy
    states branch 0's group; pass_at_n returns the group that is the gold answer, written otherwise."""
    class Result:
        branches = MATH_BRANCHES

    stated = stated_answers(extract_math, MATH_BRANCHES)
    assert [a and a.value for a in stated] == ["1/3", "0.5", "0.5", None, "0.5", "1/3"]
    assert [a and (a.start, a.end) for a in stated][:2] == [(10, 21), (7, 15)]  # each branch's own span
    assert select(Result(), "majority", extract_math) == "0.5"
    assert select(Result(), "greedy", extract_math) == "1/3"
    assert select(Result(), "pass_at_n", extract_math, gold=r"\frac{2}{4}") == "0.5"
    assert select(Result(), "pass_at_n", extract_math, gold="2") == "0.5"  # no branch right: majority's pick


def test_the_fit_groups_math_answers_as_selection_does():
    """scoring.batch_results' group ids (the test-time fit's input) from the same grouped answers."""
    import torch

    from lover_lmeval.core.results import LoverResult
    from lover_lmeval.core.verify.scoring import batch_results, gold_labels

    result = LoverResult(MATH_BRANCHES, torch.zeros(len(MATH_BRANCHES), 2, 3), None)
    _, _, groups, answers = batch_results([result], "math")
    assert groups.tolist() == [[0, 1, 1, 2, 1, 0]] and answers == [["1/3", "0.5", "0.5", None, "0.5", "1/3"]]
    labels = gold_labels(answers, [r"\frac{1}{2}"], 6, "math")
    assert labels.tolist() == [[0.0, 1.0, 1.0, 0.0, 1.0, 0.0]]


HANGING_WORKER = (sys.executable, "-c", """
import json, sys, time
print("ready", flush=True)
for line in sys.stdin:
    if json.loads(line)[1] == "hang":
        time.sleep(3600)  # a computation no signal stops, as a huge integer power inside SymPy's C code
    print("true", flush=True)
""")


def _timed(worker: MathWorker, *request: str) -> tuple[bool, float]:
    started = time.monotonic()
    return worker.call(*request), time.monotonic() - started


@pytest.mark.parametrize("thread", ["main", "worker thread"])
def test_each_call_is_bounded_in_time_in_any_thread(thread):
    """A request the child never answers returns False once its bound (0.5 s) has passed and well before the child
    would answer (never), its process killed; the next call starts a fresh child and is answered. In a thread that is
    not the main one too, where math-verify's own bound (signal.alarm) cannot run. The calls that must be answered get
    60 s: how fast a loaded CPU answers is the machine's state, not the bound's."""
    worker, outcomes = MathWorker(HANGING_WORKER, timeout_s=60), []

    def calls():
        outcomes.append(_timed(worker, "parse", "1"))
        first = worker.process.pid
        worker.timeout_s = 0.5
        outcomes.append(_timed(worker, "parse", "hang"))
        worker.timeout_s = 60
        outcomes.append(_timed(worker, "parse", "1"))
        outcomes.append(worker.process.pid != first)

    if thread == "main":
        calls()
    else:
        runner = threading.Thread(target=calls)
        runner.start()
        runner.join(timeout=60)
    worker.close()
    (answered, _), (hung, waited), (again, _), restarted = outcomes
    assert answered and not hung and again and restarted
    assert 0.5 <= waited < 30 and worker.timeouts == 1


def test_math_verify_runs_off_the_main_thread_here_but_not_in_process():
    """math-verify called in-process from a thread raises (its signal.alarm bound); through the worker it answers."""
    from math_verify import parse

    found: dict[str, object] = {}

    def in_thread():
        try:
            parse("$1$")
        except ValueError as error:
            found["in_process"] = error
        found["worker"] = extract_math(r"\boxed{\frac{7}{9}}")

    runner = threading.Thread(target=in_thread)
    runner.start()
    runner.join(timeout=60)
    assert "threaded environment" in str(found["in_process"])
    assert found["worker"] == Answer(r"\frac{7}{9}", 7, 18)


def test_lover_view_marks_the_gold_group_by_equivalence():
    """`lover view`'s question: the branches' answers in their groups' representatives, and the gold \\frac{1}{2}
    shown as the group "0.5" the page marks right (its script compares strings)."""
    import numpy as np

    from lover_lmeval.apps.view_page import TaskInput, question_data

    texts = [b.text for b in MATH_BRANCHES]
    task = TaskInput(name="t", extract="math", metric="lover_match", doc_ids=[0], table={"majority": np.array([1.0])},
                     gold=[r"\frac{1}{2}"], picks={"majority": ["0.5"]}, prompts=["p"], texts=[texts],
                     finish=[["eos"] * len(texts)], scores=[{}], reported={}, fit=None, branches=[None])
    question = question_data(task, 0, extract_math, ["majority"], [], [])
    assert [branch[1] for branch in question["b"]] == ["1/3", "0.5", "0.5", None, "0.5", "1/3"]
    assert question["g"] == "0.5" and question["gr"] == [("1/3", [0, 5]), ("0.5", [1, 2, 4])]
