"""Tests for the iGSM generator.

The answer checker below is deliberately independent of the generator: it only reads the
question text, plus the public category vocabulary (the world knowledge that a Femur is a
Body Part), and solves the problem itself mod 23.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lover_lmeval.data import igsm

MOD = 23
REPO_ROOT = Path(__file__).resolve().parents[1]
LAYER_OF_CATEGORY = {family.plural: layer for hierarchy in igsm.HIERARCHIES
                     for layer, family in enumerate(hierarchy)}
LAYER_OF_ITEM = {item: layer for hierarchy in igsm.HIERARCHIES
                 for layer, family in enumerate(hierarchy) for item in family.items}


def parse_quantity(text):
    total = re.fullmatch(r"the total number of (.+) in each (.+)", text)
    if total:
        return ("total", total[2], total[1])
    edge = re.fullmatch(r"each (.+)'s (.+)", text)
    assert edge, f"unparseable quantity: {text!r}"
    return ("edge", edge[1], edge[2])


def parse_definition(rhs):
    """Return (function of operand values, operand quantities) for a sentence's right-hand side."""
    adjust = lambda x: x  # noqa: E731 - identity when no "N more than" style prefix
    prefix = re.fullmatch(r"(\d+) (more than|less than|times) (.+)", rhs)
    if prefix:
        k, how, rhs = int(prefix[1]), prefix[2], prefix[3]
        adjust = {"more than": lambda x: x + k, "less than": lambda x: x - k, "times": lambda x: k * x}[how]
    if rhs.isdigit():
        return (lambda values: adjust(int(rhs))), []
    for word, combine in (("sum", sum), ("difference", lambda v: v[0] - v[1]), ("product", lambda v: v[0] * v[1])):
        if rhs.startswith(f"the {word} of "):
            operands = [parse_quantity(part) for part in re.split(r", | and ", rhs[len(f"the {word} of "):])]
            return (lambda values, combine=combine: adjust(combine(values))), operands
    return (lambda values: adjust(values[0])), [parse_quantity(rhs)]


def solve(question):
    """Parse the problem text and return (value of the asked quantity, evaluator, stated edges)."""
    *statements, ask = re.split(r"(?<=[.?]) ", question)
    definitions = {}
    for statement in statements:
        match = re.fullmatch(r"The number of (each .+?) equals (.+)\.", statement)
        assert match, f"unparseable sentence: {statement!r}"
        quantity = parse_quantity(match[1])
        assert quantity[0] == "edge" and quantity not in definitions
        definitions[quantity] = parse_definition(match[2])
    children = {}
    for _, parent, child in definitions:
        children.setdefault(parent, []).append(child)
    cache = {}

    def value(quantity):
        if quantity not in cache:
            kind, parent, name = quantity
            if kind == "edge":
                function, operands = definitions[quantity]
                cache[quantity] = function([value(q) for q in operands]) % MOD
            else:
                target = LAYER_OF_CATEGORY[name]
                cache[quantity] = sum(
                    value(("edge", parent, child)) * (1 if LAYER_OF_ITEM[child] == target else value(("total", child, name)))
                    for child in children.get(parent, [])) % MOD
        return cache[quantity]

    match = re.fullmatch(r"How many (.+) does each (.+) have( in total)?\?", ask)
    assert match, f"unparseable question: {ask!r}"
    asked = ("total", match[2], match[1]) if match[1] in LAYER_OF_CATEGORY else ("edge", match[2], match[1])
    return value(asked), value, list(definitions)


def parse_solution(solution):
    """Return [(label, variable, [expression, ..., result])] and the final answer."""
    steps = re.findall(r"Define (.+?) as ([A-Za-z]+); so \2 = ([^.]+)\.", solution)
    final = re.search(r"Thus, the answer is (\d+)\.$", solution)
    assert final, solution
    return [(label, variable, rhs.split(" = ")) for label, variable, rhs in steps], int(final[1])


def arithmetic(expression):
    assert re.fullmatch(r"[0-9+\-*() ]+", expression), expression
    return eval(expression) % MOD  # safe: digits and operators only


@pytest.fixture(scope="module")
def problems_by_max_op():
    return {max_op: igsm.generate(igsm.IGSMConfig(max_op=max_op), 50) for max_op in (2, 4, 8, 16)}


@pytest.mark.parametrize("max_op", [2, 4, 8, 16])
def test_independent_solver_matches_answer(problems_by_max_op, max_op):
    for record in problems_by_max_op[max_op]:
        assert set(record) == {"id", "question", "solution", "answer", "n_op", "max_op", "seed"}
        assert record["answer"] == str(solve(record["question"])[0]), record["id"]
        assert 0 <= int(record["answer"]) < MOD


@pytest.mark.parametrize("max_op", [2, 4, 8, 16])
def test_solution_uses_exactly_n_op_operations(problems_by_max_op, max_op):
    for record in problems_by_max_op[max_op]:
        steps, final = parse_solution(record["solution"])
        _, true_value, _ = solve(record["question"])
        bindings, operations = {}, 0
        for label, variable, chain in steps:
            assert variable not in bindings
            result = int(chain[-1])
            if len(chain) > 1:
                symbolic = chain[0]
                operations += len(re.findall(r"[+\-*]", symbolic))
                substituted = re.sub(r"[A-Za-z]+", lambda m: str(bindings[m[0]]), symbolic)
                assert all(arithmetic(step) == result for step in [substituted, *chain[1:-1]]), chain
            quantity = parse_quantity(label if label.startswith("the total") else f"each {label}")
            assert true_value(quantity) == result, (record["id"], label)
            bindings[variable] = result
        assert operations == record["n_op"], record["id"]
        assert (max_op + 1) // 2 <= record["n_op"] <= max_op
        assert str(final) == record["answer"]


def test_detail_level_zero_states_only_needed_sentences(problems_by_max_op):
    for record in problems_by_max_op[8]:
        steps, _ = parse_solution(record["solution"])
        needed = {parse_quantity(f"each {label}") for label, _, _ in steps if not label.startswith("the total")}
        assert set(solve(record["question"])[2]) == needed


@pytest.mark.parametrize("detail_level", [5, 10])
def test_detail_level_adds_irrelevant_sentences_that_still_solve(detail_level):
    minimal = igsm.generate(igsm.IGSMConfig(max_op=4, detail_level=0), 30)
    detailed = igsm.generate(igsm.IGSMConfig(max_op=4, detail_level=detail_level), 30)
    for record in detailed:
        answer, value, stated = solve(record["question"])
        assert record["answer"] == str(answer)
        for quantity in stated:  # raises KeyError if an irrelevant sentence refers to an unstated quantity
            value(quantity)
    assert sum(len(solve(r["question"])[2]) for r in detailed) > sum(len(solve(r["question"])[2]) for r in minimal)


def in_dependency_order(question):
    """Whether every sentence refers only to quantities stated before it."""
    seen = set()
    for statement in re.split(r"(?<=[.?]) ", question)[:-1]:
        match = re.fullmatch(r"The number of (each .+?) equals (.+)\.", statement)
        if not all(q in seen for q in parse_definition(match[2])[1] if q[0] == "edge"):
            return False
        seen.add(parse_quantity(match[1]))
    return True


def test_perm_level_controls_sentence_order():
    ordered = igsm.generate(igsm.IGSMConfig(max_op=8, perm_level=0), 30)
    shuffled = igsm.generate(igsm.IGSMConfig(max_op=8, perm_level=5), 30)
    assert all(in_dependency_order(r["question"]) for r in ordered)
    assert sum(in_dependency_order(r["question"]) for r in shuffled) < 10


def test_same_seed_same_bytes_and_different_seed_differs(tmp_path):
    config = igsm.IGSMConfig(max_op=8, detail_level=3)
    igsm.write_jsonl(igsm.generate(config, 20), tmp_path / "a.jsonl")
    igsm.write_jsonl(igsm.generate(igsm.IGSMConfig(max_op=8, detail_level=3), 20), tmp_path / "b.jsonl")
    igsm.write_jsonl(igsm.generate(igsm.IGSMConfig(max_op=8, detail_level=3, seed=7), 20), tmp_path / "c.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert (tmp_path / "a.jsonl").read_bytes() != (tmp_path / "c.jsonl").read_bytes()


def test_problem_i_does_not_depend_on_n():
    config = igsm.IGSMConfig(max_op=4)
    assert igsm.generate(config, 6)[:3] == igsm.generate(config, 3)


def test_output_independent_of_pythonhashseed():
    script = ("import hashlib, json; from lover_lmeval.data import igsm; "
              "records = igsm.generate(igsm.IGSMConfig(max_op=8, detail_level=5), 15); "
              "print(hashlib.sha256(json.dumps(records).encode()).hexdigest())")
    digests = set()
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO_ROOT)}
        digests.add(subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO_ROOT, check=True,
                                   capture_output=True, text=True).stdout.strip())
    local = igsm.generate(igsm.IGSMConfig(max_op=8, detail_level=5), 15)
    digests.add(hashlib.sha256(json.dumps(local).encode()).hexdigest())
    assert len(digests) == 1


@pytest.mark.parametrize("field, value", [
    ("max_op", 0), ("max_op", 25), ("max_op", "8"), ("max_edge", 1), ("max_edge", 41),
    ("perm_level", -1), ("perm_level", 6), ("detail_level", 11), ("seed", -1), ("seed", 1.5),
])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        igsm.IGSMConfig(**{field: value})


def test_max_edge_too_small_for_max_op_is_rejected():
    with pytest.raises(ValueError, match=r"max_edge=10 .*max_op=16"):
        igsm.IGSMConfig(max_op=16, max_edge=10)
    igsm.IGSMConfig(max_op=16, max_edge=igsm.min_edges_for(16))


def test_run_writes_n_lines(tmp_path):
    from lover_lmeval.apps import igsm as igsm_app

    parser = argparse.ArgumentParser()
    igsm_app.add_arguments(parser)
    out = tmp_path / "sub" / "igsm.jsonl"
    args = parser.parse_args(["--max-op", "4", "--n", "7", "--out", str(out)])
    assert (args.seed, args.max_edge, args.perm_level, args.detail_level) == (42, 12, 5, 0)
    assert igsm_app.run(args) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 7
    assert [json.loads(line)["max_op"] for line in lines] == [4] * 7


def test_a_train_split_sized_set_has_distinct_questions():
    """1,500 problems at max_op 8, the train split's size: no question twice (its speed is not a test's to time)."""
    records = igsm.generate(igsm.IGSMConfig(max_op=8), 1500)
    assert len({r["question"] for r in records}) == 1500
