"""The benchmark scripts' shared helpers (benchmarks/bench_common.py): a bad document range is refused with the
value and the expected form, before any model is loaded; and every script decides a right answer as the package
does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchmarks.bench_common import docs_range


def test_docs_range_reads_start_and_end():
    assert docs_range("0:100") == (0, 100)
    assert docs_range("134:200") == (134, 200)


@pytest.mark.parametrize("text, why", [("100", "is not START:END"), ("a:b", "is not START:END"),
                                       ("1:2:3", "is not START:END"), ("50:50", "is empty"), ("-1:5", "negative")])
def test_docs_range_refuses_a_bad_range_naming_it(text, why):
    with pytest.raises(SystemExit, match=rf"--test-docs '{text}' .*{why}"):
        docs_range(text, "--test-docs")


def _mentions_gold(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and "gold" in n.id or isinstance(n, ast.Attribute) and "gold" in n.attr
               or isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "gold"
               for n in ast.walk(node))


#: Comparisons of two gold strings, not of an answer with gold: the check that two exports are of the same data.
IDENTITY_CHECKS = {"outside_check.py": "the authors' logged gt_answer against their export's, before anything is read"}


def test_no_benchmark_script_compares_an_answer_with_gold_by_string_equality():
    """A math answer is right when math-verify calls it equal to the gold one (`\\dfrac12` is `\\frac{1}{2}`), so
    `pick == gold` scores it wrong: run 32's selector report first had pass@10 0.32 where lm_eval's own rows, through
    `answers.matches_gold`, had 0.38. Every `==` / `!=` with a gold value on one side, in every benchmark script, is
    such a comparison; they go through `matches_gold(extract, value, gold)`."""
    found = []
    for path in sorted((Path(__file__).resolve().parents[1] / "benchmarks").rglob("*.py")):
        if path.name in IDENTITY_CHECKS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
                    and any(_mentions_gold(side) for side in [node.left, *node.comparators])):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, f"answers compared with gold by equality (use answers.matches_gold): {', '.join(found)}"
