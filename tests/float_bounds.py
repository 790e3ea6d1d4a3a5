"""Tolerances derived from the computation, for comparing two float32 computations of the same value: each side is
held to a float64 reference within what float32 rounding can move it, so a bound is not a number seen on one CPU.

The model of rounding is the probabilistic one of Higham & Mary (2019, "A new approach to probabilistic rounding
error analysis"): a sum of K float32 terms errs by about u * sqrt(K) of its magnitude (u = 2^-24, the unit roundoff),
where the worst case K * u is never approached by rounding errors that are independent; a forward pass's relative
error is then u times the sum of sqrt(K) over the products on its path. The errors seen against float64 under three
kernel sets (AVX-512, AVX2, scalar) are 7 to 12 times below these bounds, and a planted error of 1e-4 of the largest
value on one feature is 6 times above them (tests/test_features.py).
"""

from __future__ import annotations

import math

U32 = 2.0 ** -24
"""float32's unit roundoff."""


def decoder_relative_error(config, positions: int) -> float:
    """A llama-like decoder's float32 hidden states relative to their largest magnitude: per layer, the q/k/v/o
    projections (sums of D terms), the attention scores (head dim) and their weighted sum (`positions` terms), the
    MLP's gate and up (D) and down (F) projections."""
    d, f = config.hidden_size, config.intermediate_size
    head = d // config.num_attention_heads
    per_layer = 4 * math.sqrt(d) + math.sqrt(head) + math.sqrt(positions) + 2 * math.sqrt(d) + math.sqrt(f)
    return U32 * config.num_hidden_layers * per_layer


def logit_statistics_error(config, positions: int, largest_logit: float) -> float:
    """Absolute error of a statistic of the next-token distribution (log-probability, top-k mean, entropy, KL to
    uniform; a probability margin): each moves by at most twice the largest logit change (the log-softmax subtracts
    a logsumexp that moves by at most the largest change), and the logits err as the hidden state does, plus the
    output projection (D terms) and the logsumexp over the vocabulary (V terms)."""
    relative = (decoder_relative_error(config, positions)
                + U32 * (math.sqrt(config.hidden_size) + math.sqrt(config.vocab_size)))
    return 2 * relative * largest_logit


def feature_tolerance(model, reference, positions: int) -> float:
    """Absolute tolerance for two float32 computations of one model's hidden states over `positions` tokens:
    `decoder_relative_error` of the largest value of `reference` (a tensor or a float), for each of the two sides."""
    largest = float(reference.detach().abs().max()) if hasattr(reference, "abs") else abs(float(reference))
    return 2 * decoder_relative_error(model.config, positions) * largest


def statistics_tolerance(model, sequences: list[list[int]]) -> float:
    """Absolute tolerance for two float32 computations of the next-token statistics along `sequences` (token ids):
    `logit_statistics_error` at their longest length and largest logit, for each of the two sides."""
    import torch

    with torch.no_grad():
        largest = max(float(model(torch.tensor([ids])).logits.abs().max()) for ids in sequences if ids)
    return 2 * logit_statistics_error(model.config, max(map(len, sequences)), largest)


U64 = 2.0 ** -53
"""float64's unit roundoff."""


def condition_tolerance(fn, inputs, terms: int, unit: float = U32) -> float:
    """Absolute tolerance for a scalar `fn(*inputs)` computed in a precision of unit roundoff `unit` against its exact
    value on the same inputs (a float64 loop over them, or a hand-worked number, whose decimal inputs the leaves'
    rounding below covers): unit * sqrt(terms) * (|f| + sum |x df/dx|). Each rounded operation moves its result v by
    a relative unit at most, which moves f by unit * |v df/dv| to first order; at the leaves that is
    sum |x df/dx| (the condition number, taken by float64 autograd through `fn` itself, so a cancellation such as
    p+ + p- - 1 inside a square counts), at the root |f|, and the levels between are bounded by these for the losses'
    sums of products, powers and logs. `terms` is the most roundings on one path from an input to f (the sums'
    lengths plus the depth; libm's log and exp, within one ulp, count twice), combined as the model above."""
    import torch

    leaves = [x.detach().double().requires_grad_() for x in inputs]
    value = fn(*leaves)
    grads = torch.autograd.grad(value, leaves, allow_unused=True)
    condition = sum(float((x.detach() * g).abs().sum()) for x, g in zip(leaves, grads) if g is not None)
    return unit * math.sqrt(terms) * (abs(float(value.detach())) + condition)


def printed_rounding(digits: int) -> float:
    """Absolute tolerance for a value written with `digits` decimals (a docstring's 0.602335): half a unit of the
    last digit, the most rounding to that many decimals moves it."""
    return 0.5 * 10.0 ** -digits


def reference_fit_tolerance(magnitude: float) -> float:
    """Absolute tolerance for two float64 runs of one fit that group the same arithmetic differently (a vectorised
    step and its straightforward loop, K tries together and one at a time, streamed and dense inputs): sqrt(U64) of
    the values' magnitude, agreement to half of float64's digits.

    Why half: each operation rounds by U64, and a fit's epochs amplify what rounding leaves (AdamW divides by the
    root of a second moment that can be near zero: 60 epochs at lr 1e-2 amplify float32's rounding about 1,000-fold,
    which is why these comparisons run in float64 and not float32, where the same amplification depends on the
    kernels a CPU picks). An amplification up to 1/sqrt(U64) = 6.7e7 still fits; a difference in what is computed
    (another draw, term or step) moves a fitted value by far more than 1e-8 of its size, which the planted checks
    show."""
    return math.sqrt(U64) * magnitude
