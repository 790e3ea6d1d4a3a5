"""LoverResult: greedy text as its str value, compact JSON for logs, pickle round trip."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from lm_eval.filters.extraction import RegexFilter

from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.results import LoverResult


def _result(with_probs=True):
    branches = [Branch("so 3 + 4 = 7. The answer is 7.", [1, 2], [0.5, 0.25], [(0, 5), (5, 30)], "stop"),
                Branch("The answer is 8.", [3], [0.9], [(0, 16)], "eos")]
    probs = {"lover": np.array([[0.9, 0.2], [0.3, 0.6]])} if with_probs else {}
    return LoverResult(branches, np.ones((2, 2, 4), np.float32), probs, layer=2)


def test_value_is_greedy_branch_so_stock_filters_score_greedy():
    result = _result()
    assert str.__str__(result) == "so 3 + 4 = 7. The answer is 7."
    regex = RegexFilter(regex_pattern=r"The answer is (\-?[0-9\.\,]+)", group_select=0)
    assert list(regex.apply([[result]], [{}])) == [["7."]]


def test_str_is_compact_json_without_arrays():
    logged = json.loads(str(_result()))
    assert logged["texts"] == ["so 3 + 4 = 7. The answer is 7.", "The answer is 8."]
    assert logged["finish"] == ["stop", "eos"]
    assert logged["features"] == [2, 2, 4]
    # p = (p+ + 1 - p-) / 2: (0.9 + 1 - 0.2) / 2 = 0.85 and (0.3 + 1 - 0.6) / 2 = 0.35
    assert logged["scores"] == {"lover": [0.85, 0.35]}


def test_pickle_round_trip_keeps_everything():
    result = _result()
    back = pickle.loads(pickle.dumps(result))
    assert isinstance(back, LoverResult) and back == result
    assert [b.text for b in back.branches] == result.texts
    np.testing.assert_array_equal(back.features, result.features)
    np.testing.assert_array_equal(back.scores(), result.scores())


def test_scores_without_a_verifier_say_how_to_get_one():
    with pytest.raises(KeyError, match="verifier=PATH"):
        _result(with_probs=False).scores()
