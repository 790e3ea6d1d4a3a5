"""The benchmark scripts' shared helpers (benchmarks/bench_common.py): a bad document range is refused with the
value and the expected form, before any model is loaded."""

from __future__ import annotations

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
