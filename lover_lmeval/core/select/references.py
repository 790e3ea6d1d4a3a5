"""The sampling rows: what the N branches score by themselves, references beside the selectors (lighteval's avg@n,
pass@k and maj@k).

They read the gold answer, so they are references like the `pass_at_n` oracle, never selectors: no strategy computes
them, no task carries a filter for them, and no selector leaderboard or recommendation lists them; `lover compare`
reports them apart, under "references", each with its 95% bootstrap interval over questions. Per question, with n
branches of which c state the gold answer (each branch's answer in its group's representative, `answers.stated_answers`,
right by `answers.matches_gold`):

- avg@N = c / n: the mean accuracy of one branch.
- pass@k = 1 - C(n - c, k) / C(n, k): the unbiased estimator of Chen et al. 2021, the probability that a k-subset of
  the n branches drawn uniformly holds a right branch (not the first k branches). pass@1 = avg@N; pass@n is 1 where
  any branch is right (`pass_at_n`).
- maj@k: the probability that majority voting over a k-subset drawn uniformly picks a right answer (again not the first
  k): the question's answer groups (formed over its n branches), counted within the subset; ties broken as the
  majority selector breaks them (`selection.pick_group`: the larger group, then the group holding the lowest branch
  index); a subset of branches without an answer picks nothing. maj@1 = avg@N; maj@n = majority's 0/1.

k = 1, 2, 4, ... below N, and N (`k_values`). maj@k is exact, not sampled (`majority_wins`); tests/test_references.py
checks both estimators against every k-subset enumerated.
"""

from __future__ import annotations

from collections import Counter
from math import comb

import numpy as np

from .answers import answer_members, matches_gold, stated_answers


def k_values(n: int) -> list[int]:
    """1, 2, 4, ... below n, then n (n = 10: [1, 2, 4, 8, 10])."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n - c, k) / C(n, k): a uniformly drawn k-subset of n branches, c of them right, holds a right one."""
    return 1.0 - comb(n - c, k) / comb(n, k)


def majority_wins(groups: list[list[int]], right: list[bool], n: int, k: int) -> float:
    """The probability that majority voting over a uniformly drawn k-subset of the n branches picks a right group.

    `groups`: each answer group's branch indices (branches without an answer in none); `right`: whether each group is
    the gold answer. A group g wins a subset S holding j of its branches, the lowest at index i, when every other group
    holds fewer than j there, or exactly j all above i (the tie-break). Counted, not enumerated:

        wins(g) = sum over j >= 1, i in g of C(#g above i, j - 1) * [x^(k - j)] prod_{h != g} P_h(x) * (1 + x)^u,
        P_h(x) = sum_{c < j} C(|h|, c) x^c + C(#h above i, j) x^j,

    with u the branches without an answer (any number of them may join), and the result sum over right g of wins(g) /
    C(n, k) (the groups' wins are disjoint events)."""
    answered = sum(len(g) for g in groups)
    unanswered = [comb(n - answered, c) for c in range(n - answered + 1)]
    total = 0
    for g, members in enumerate(groups):
        if not right[g]:
            continue
        others = [h for index, h in enumerate(groups) if index != g]
        for j in range(1, min(len(members), k) + 1):
            for position, i in enumerate(members):
                ways_here = comb(len(members) - position - 1, j - 1)  # the other j - 1 of g's branches above i
                if ways_here == 0:
                    continue
                # groups alike in size and in how many branches they hold above i have one factor: raised once
                factors = Counter((len(h), sum(index > i for index in h)) for h in others)
                product = unanswered[: k - j + 1]
                for (size, above), times in factors.items():
                    factor = [comb(size, c) for c in range(j)] + [comb(above, j)]  # comb is 0 past size
                    product = _times(product, _power(factor, times, k - j), k - j)
                total += ways_here * (product[k - j] if k - j < len(product) else 0)
    return total / comb(n, k)


def _power(a: list[int], times: int, degree: int) -> list[int]:
    """a(x)^times up to x^degree, by squaring."""
    out = [1]
    while times:
        if times & 1:
            out = _times(out, a, degree)
        times >>= 1
        if times:
            a = _times(a, a, degree)
    return out


def _times(a: list[int], b: list[int], degree: int) -> list[int]:
    """The product of two polynomials (coefficient lists, lowest power first), up to x^degree."""
    out = [0] * min(len(a) + len(b) - 1, degree + 1)
    for p, x in enumerate(a[: len(out)]):
        if x:
            for q, y in enumerate(b[: len(out) - p]):
                out[p + q] += x * y
    return out


def reference_rows(results: list, gold: list[str], extract) -> dict[str, np.ndarray]:
    """Per row (avg@N, then pass@k and maj@k for k in k_values(N)) each question's value, over each question's first N
    branches, N the fewest any question has."""
    n = min(len(r.branches) for r in results)
    ks = k_values(n)
    rows: dict[str, list[float]] = {f"avg@{n}": [], **{f"pass@{k}": [] for k in ks}, **{f"maj@{k}": [] for k in ks}}
    for result, target in zip(results, gold):
        values = [None if a is None else a.value for a in stated_answers(extract, result.branches[:n])]
        members = answer_members(values)
        right = [matches_gold(extract, answer, target) for answer in members]
        c = sum(len(branches) for branches, is_right in zip(members.values(), right) if is_right)
        rows[f"avg@{n}"].append(c / n)
        for k in ks:
            rows[f"pass@{k}"].append(pass_at_k(n, c, k))
            rows[f"maj@{k}"].append(majority_wins(list(members.values()), right, n, k))
    return {name: np.array(values) for name, values in rows.items()}
