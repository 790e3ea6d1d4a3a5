"""One test-time fit per task over every question of the task, however many ranks decoded it.

Under data parallelism (`torchrun` / `accelerate launch`) lm-eval gives each rank a share of the requests, and pads
the shorter shares with copies of their last request. A fit on one rank's share would make a question's answer
depend on the launch. So every rank sends its results (branches, features) to all others, drops the padding copies,
orders the task's questions by (doc_id, prompt), and runs the same seeded fit on the same inputs; then it copies the
scores of its own questions back onto its results. With one process this is the same path minus the exchange, so
one and k ranks fit on identical inputs.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from ..core.pipeline import Pipeline
from ..core.results import LoverResult

Key = tuple  # (doc_id, prompt text, occurrence): one response lm-eval expects; its padding copies are dropped


def _keys(requests) -> list[tuple[str, Key, bool]]:
    """(task, key, is_copy) of each request. The adapter hands each question once (a task's `repeats` copies are one
    question with K branches), so a later occurrence is one of lm-eval's padding copies: its key is the question's
    first occurrence, whose scores it takes."""
    seen: dict = defaultdict(int)
    keys = []
    for request in requests:
        doc_id = getattr(request, "doc_id", None)
        task, question = getattr(request, "task_name", None) or "", (-1 if doc_id is None else int(doc_id),
                                                                     request.args[0])
        occurrence = seen[task, question]
        seen[task, question] += 1
        keys.append((task, (*question, 0), occurrence > 0))
    return keys


def _exchange(local: dict, world_size: int) -> list[dict]:
    """Every rank's {task: {key: result}}, in rank order (pickled through torch.distributed: gloo or nccl)."""
    if world_size <= 1:
        return [local]
    gathered: list = [None] * world_size
    torch.distributed.all_gather_object(gathered, local)
    return gathered


def fit_every_task(pipeline: Pipeline, requests, results, world_size: int, extracts: dict[str, str] | None = None,
                   unfitted: set[str] = frozenset()) -> None:
    """Report and fit each task on all its questions across ranks, grouping its answers with `extracts[task]` (default
    model_args' extract); store the scores on this rank's `results`. A task in `unfitted` (its answers cannot be
    grouped: harness/stock_rows.py) is neither reported nor fitted."""
    keys = _keys(requests)
    local: dict[str, dict[Key, LoverResult]] = defaultdict(dict)
    for (task, key, is_copy), result in zip(keys, results):
        if not is_copy:
            local[task][key] = result
    fitted = pipeline.fitted_scorers
    merged: dict[str, dict[Key, LoverResult]] = defaultdict(dict)
    # Without a test-time fit nothing depends on other ranks' questions: no exchange (features are large).
    for share in _exchange(dict(local), world_size if fitted else 1):
        for task, questions in share.items():
            for key, result in questions.items():
                merged[task].setdefault(key, result)
    for task in sorted(set(merged) - set(unfitted)):
        ordered = sorted(merged[task])
        pipeline.finish_task([merged[task][k] for k in ordered], task or None, (extracts or {}).get(task))
    if not fitted:
        return
    for (task, key, _), result in zip(keys, results):  # this rank's results, padding copies included
        source = merged[task].get(key)
        if task in unfitted:
            continue
        if source is not None and source is not result:  # the fits' scores only; loaded verifiers scored locally
            for name in fitted:
                result.verifier_probs[name] = source.verifier_probs[name]
                result.scored_by[name] = source.scored_by[name]
            if "lover" in fitted:
                result.fit_extract = source.fit_extract
