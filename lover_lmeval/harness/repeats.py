"""A task's `repeats: K` as one question with K branches.

lm-eval asks for K answers to a question of a task with `repeats: K` (`gsm8k_cot_self_consistency`: 64) by sending
the same request object K times in a row. Decoded as K questions, a self-consistency run would decode K x N branches
and fit LoVer on K copies of one question. Here they are one question decoded once with N = K branches (`n_branches`
from `repeats` when model_args leave it unset; a contradiction refused before decoding), and copy j answers with
branch j (`LoverResult.copy_for`): the task's own `majority_vote` / `take_first_k` rows and every selector read the same
K branches, and the bank, the fit and the rank checks see the question once.
"""

from __future__ import annotations

from .model_args import LoverUsageError


def collapse(requests) -> tuple[list, list[int]]:
    """(each question once, how many consecutive copies of it lm-eval sent). Copies beyond a request's `repeats`
    (lm-eval's padding of a shorter rank's share) start another entry, which harness/ranks.py drops from the fit."""
    unique, counts = [], []
    for request in requests:
        if unique and request is unique[-1] and counts[-1] < max(1, int(getattr(request, "repeats", 1) or 1)):
            counts[-1] += 1
        else:
            unique.append(request)
            counts.append(1)
    return unique, counts


def branches_for(request, n_branches: int, explicit: set[str]) -> int:
    """N for this question: the task's `repeats` when above 1, else model_args' n_branches; LoverUsageError when
    model_args set another n_branches than the task's repeats."""
    repeats = max(1, int(getattr(request, "repeats", 1) or 1))
    if repeats == 1:
        return n_branches
    if "n_branches" in explicit and n_branches != repeats:
        task = getattr(request, "task_name", None) or "?"
        raise LoverUsageError(
            f"task {task} has repeats: {repeats} (lm-eval asks for {repeats} answers to each question), which lover "
            f"decodes as one question with {repeats} branches, but model_args set n_branches={n_branches}: drop "
            f"n_branches (it is then {repeats}) or pass n_branches={repeats}.")
    return repeats


def expand(results: list, counts: list[int]) -> list:
    """One answer per request lm-eval sent: copy j of a question is its result's branch j (`copy_for`)."""
    expanded = []
    for result, count in zip(results, counts):
        expanded += [result.copy_for(j % len(result.branches)) for j in range(count)]
    return expanded
