"""Per-token statistics (token_stats.py): the formulas on a hand-worked example, the batched computation against a
plain loop, and their compact float16 storage."""

from __future__ import annotations

import math

import pytest
import torch

from lover_lmeval.core.decode.token_stats import STAT_NAMES, TOP_K, decode_stats, encode_stats, stats_dict, step_stats


def test_a_hand_worked_distribution():
    """z = (0, ln 2, ln 3, ln 6): exp(z) = (1, 2, 3, 6), logsumexp = ln 12, p = (1, 2, 3, 6) / 12; chosen token 2.
    logprob = ln(3/12) = -ln 4 = -1.386294.
    topk_logprob, k = 2: the two largest l are ln(6/12) and ln(3/12): (-0.693147 - 1.386294) / 2 = -1.039721.
    entropy = 1/12 ln 12 + 2/12 ln 6 + 3/12 ln 4 + 6/12 ln 2 = 0.207076 + 0.298627 + 0.346574 + 0.346574 = 1.198849.
    kl_uniform = sum_v 1/4 ln((1/4) / p_v) = 1/4 (ln 3 + ln 1.5 + ln 1 + ln 0.5) = 0.202733
               = logsumexp - mean(z) - ln 4 = 2.484907 - 0.895880 - 1.386294.
    With the default k = TOP_K = 20 > V = 4, topk_logprob is the mean of all four: (ln 1/12 + ln 2/12 + ln 3/12 +
    ln 6/12) / 4 = -1.589027. Adding a constant to every logit changes nothing."""
    z = torch.tensor([0.0, math.log(2), math.log(3), math.log(6)])
    expected = torch.tensor([-1.386294, -1.039721, 1.198849, 0.202733])
    torch.testing.assert_close(step_stats(z, torch.tensor(2), k=2), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(step_stats(z + 7.5, torch.tensor(2), k=2), expected, atol=1e-5, rtol=0)
    assert TOP_K == 20 and STAT_NAMES == ("logprob", "topk_logprob", "entropy", "kl_uniform")
    assert step_stats(z, torch.tensor(2))[1].item() == pytest.approx(-1.589027, abs=1e-6)
    # The softmax a decoder already has gives the same values.
    torch.testing.assert_close(step_stats(z, torch.tensor(2), k=2, probs=z.softmax(-1)), expected, atol=1e-6, rtol=0)


def test_a_logit_of_minus_infinity_adds_nothing_to_the_entropy():
    """z = (0, 0, -inf): p = (1/2, 1/2, 0), entropy = ln 2 (0 log 0 = 0, not nan); KL(U || p) is infinite (U puts
    mass 1/3 where p has none); the chosen token 1 has logprob ln(1/2)."""
    stats = step_stats(torch.tensor([0.0, 0.0, -math.inf]), torch.tensor(1))
    assert stats[0].item() == pytest.approx(-math.log(2))
    assert stats[2].item() == pytest.approx(math.log(2))
    assert stats[3].item() == math.inf


def _loop(logits: list[float], chosen: int, k: int) -> list[float]:
    """The definitions one vocabulary entry at a time, in float64."""
    top = max(logits)
    lse = top + math.log(sum(math.exp(x - top) for x in logits))
    logs = [x - lse for x in logits]
    return [logs[chosen], sum(sorted(logs, reverse=True)[:k]) / k, -sum(math.exp(v) * v for v in logs),
            -math.log(len(logs)) - sum(logs) / len(logs)]


def test_batched_statistics_equal_a_plain_loop():
    """(2, 3, 50) logits of scale 4 (peaked, like a language model's) and a chosen token per (2, 3) position, k = 7:
    each output row equals the definitions applied to that row alone in float64."""
    generator = torch.Generator().manual_seed(0)
    logits = 4 * torch.randn((2, 3, 50), generator=generator)
    chosen = torch.randint(0, 50, (2, 3), generator=generator)
    batched = step_stats(logits, chosen, k=7)
    assert batched.shape == (2, 3, 4) and batched.dtype == torch.float32
    for i in range(2):
        for j in range(3):
            expected = _loop(logits[i, j].double().tolist(), int(chosen[i, j]), 7)
            assert batched[i, j].tolist() == pytest.approx(expected, abs=2e-5)


def test_stats_survive_their_float16_encoding():
    """Per-token rows -> {name: list} -> base64 float16 -> back: each value within float16's rounding (relative
    2^-11 = 4.9e-4 for normal values; -0.00003 is subnormal in float16, absolute error <= 2^-25 = 3e-8), and the
    bytes are 2 per value (8 values of one statistic: 16 bytes, 24 base64 characters)."""
    rows = [[-0.1234567, -2.5, 3.3333333, 0.0], [-12.75, -7.125, 0.015625, 21.2], [-0.00003, -1e-9, 10.8, 6e4]]
    stats = stats_dict(rows)
    assert stats["logprob"] == [-0.1234567, -12.75, -0.00003] and stats["kl_uniform"] == [0.0, 21.2, 6e4]
    back = decode_stats(encode_stats(stats))
    for name in STAT_NAMES:
        for original, restored in zip(stats[name], back[name]):
            assert restored == pytest.approx(original, rel=2 ** -11, abs=2 ** -25)
    assert decode_stats(encode_stats(back)) == back  # already float16 values: exact
    assert len(encode_stats({"logprob": [1.0] * 8})["logprob"]) == 24
    assert stats_dict([]) == {name: [] for name in STAT_NAMES}


def test_damaged_stored_stats_name_the_fix():
    with pytest.raises(ValueError, match="not base64 float16 arrays.*rescore it"):
        decode_stats({"logprob": "not base64!"})
