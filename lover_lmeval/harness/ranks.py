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

Key = tuple  # (doc_id, prompt text): a question of a task; lm-eval's padding copies share it


def _by_task(requests, results) -> dict[str, dict[Key, LoverResult]]:
    tasks: dict[str, dict[Key, LoverResult]] = defaultdict(dict)
    for request, result in zip(requests, results):
        doc_id = getattr(request, "doc_id", None)
        key = (-1 if doc_id is None else int(doc_id), request.args[0])
        tasks[getattr(request, "task_name", None) or ""].setdefault(key, result)  # padding copies: the first stays
    return tasks


def _exchange(local: dict, world_size: int) -> list[dict]:
    """Every rank's {task: {key: result}}, in rank order (pickled through torch.distributed: gloo or nccl)."""
    if world_size <= 1:
        return [local]
    gathered: list = [None] * world_size
    torch.distributed.all_gather_object(gathered, local)
    return gathered


def fit_every_task(pipeline: Pipeline, requests, results, world_size: int) -> None:
    """Report and fit each task on all its questions across ranks; store the scores on this rank's `results`."""
    local = _by_task(requests, results)
    merged: dict[str, dict[Key, LoverResult]] = defaultdict(dict)
    for share in _exchange(local, world_size):
        for task, questions in share.items():
            for key, result in questions.items():
                merged[task].setdefault(key, result)
    for task in sorted(merged):
        keys = sorted(merged[task])
        pipeline.finish_task([merged[task][k] for k in keys], task or None)
        for request, result in zip(requests, results):  # this rank's results, padding copies included
            task_of = getattr(request, "task_name", None) or ""
            doc_id = getattr(request, "doc_id", None)
            source = merged[task].get((-1 if doc_id is None else int(doc_id), request.args[0])) if task_of == task \
                else None
            if source is not None and source is not result:
                result.verifier_probs.update(source.verifier_probs)
                result.scored_by.update(source.scored_by)
                result.fit_extract = source.fit_extract
