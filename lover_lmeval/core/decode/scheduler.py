"""The one decoding loop: admit questions into free rows, step the rows in blocks, hand each question over whole.

Two row stores run under it (engine.row_store chooses): growing.py's `GrowingRows` (the batch's KV cache grows a
column a step and sheds finished rows; any mode) and static.py's `StaticRows` (fixed rows of a preallocated cache a
CUDA graph can capture; `cot`). A store keeps the rows' KV cache and the tokens they feed next on the device; this
loop owns everything else: which question joins when, the host-side checks for an end (`Row.take_pending`), and the
hand-over.

Each round: admit the next questions whose N rows fit (continuous batching: a question joins as soon as rows free
up, all N branches at once, in prompt order); take the tokens of the last block on the host and check them one by
one, as a step-by-step loop would, so that a row is cut where it ended whatever it decoded after that in the block;
yield each question whose N branches are all done; then run a block of steps with no host transfer and bring its
packed values (token, margin, statistics) over in ONE copy (`rows.to_host`).

Dimensions: A live rows, S rows of the store's step (A, or every slot of a static store), K steps in a block.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Protocol

import torch

from . import rows as step_rows
from .branch import Branch
from .kv import BranchCache, RowBatch
from .rows import Finished, Row, prefill


class RowStore(Protocol):
    """Where the scheduler's rows decode: their KV cache, and the token each feeds next (on the device)."""

    rows: list[Row]
    """The live rows, in the order `step`'s values come (after `live_index`)."""

    def room(self) -> int:
        """How many rows a joining question may take now."""

    def admit(self, joining: RowBatch, new_rows: list[Row], first: torch.Tensor) -> None:
        """Take a prefill's rows (their cache and mask) and their first tokens, (Q*N,), to feed next."""

    def snapshot(self, index: int, length: int) -> BranchCache:
        """A copy of the first `length` own cache columns (prompt and fed tokens) of `rows[index]`."""

    def release(self, indices: list[int]) -> None:
        """The rows at these positions of `rows` ended: free them."""

    def step(self, config, generators: dict) -> torch.Tensor:
        """One token for every row of the step, fed back on the device: (S, 6) packed values (rows.pack)."""

    def live_index(self) -> torch.Tensor | None:
        """Which of the step's S rows are `rows`, in order (None: all of them)."""


@torch.inference_mode()  # no autograd graph: a step's activations would otherwise live as long as its outputs
def schedule(store: RowStore, model, tokenizer, prompts: list[list[int]], config, max_new_tokens: int,
             stop: list[str], eos_ids: set[int], pad_id: int, sync: int
             ) -> Iterator[tuple[int, list[Branch], list[BranchCache]]]:
    """Decode N branches (config.n_branches) for each prompt through `store`; yield `(q, branches, caches)` as soon
    as prompt q's N branches are done (the bank writes it then: a kill loses only the questions still decoding).
    `sync` steps a block (BatchingConfig.steps_between_syncs); no row passes its `max_new_tokens` inside one."""
    n = config.n_branches
    queue, generators, finished = deque(range(len(prompts))), {}, Finished(n)
    while queue or store.rows:
        admitted = []
        while queue and store.room() >= (len(admitted) + 1) * n:
            admitted.append(queue.popleft())
        if admitted:
            joining, new_rows, first = prefill(model, prompts, admitted, config, pad_id, generators)
            store.admit(joining, new_rows, first)
            del joining  # the store copied what it keeps: this prefill's cache must not outlive the admission
        ended = []
        for index, row in enumerate(store.rows):
            reason = row.take_pending(tokenizer, stop, eos_ids, max_new_tokens)
            if reason is None:
                continue
            ended.append(index)
            question = finished.add(row, tokenizer, stop, reason,
                                    lambda length, index=index: store.snapshot(index, length))
            if question is not None:
                generators.pop(row.q, None)
                yield question
                del question  # its caches are the consumer's now: held here, they would outlive its features
        if ended:
            store.release(ended)
        if not store.rows or (queue and store.room() >= n):
            continue  # admit the next questions before the step, so no row idles through it
        steps = min(sync, min(max_new_tokens - len(row.ids) for row in store.rows))
        packed = torch.stack([store.step(config, generators) for _ in range(steps)], dim=1)  # (S, K, 6)
        live = store.live_index()
        for row, block in zip(store.rows, step_rows.to_host(packed if live is None else packed[live])):  # (A, K, 6)
            row.pending = block
