"""CoT-decoding on a fixed set of rows: a preallocated KV cache (transformers' `StaticCache`) whose shapes never change
from step to step, so that a step can be compiled and captured as a CUDA graph (`BatchingConfig.static_cache`).

growing.py's rows grow their batch's cache by one column a step, drop the rows of a finished question and
concatenate the next question's; every shape changes, and each step launches its kernels from Python anew. Here the
cache holds R rows x L columns from the start. Every row writes the step's token into the same column c (the cache's
own write position); a row's own tokens are the `lengths[s]` columns before c, its attention mask hides every other
column, and its position ids are its own, so it computes what it would alone. A question's N branches take N free rows
("slots") in place, their prefill (still run as one dynamic batch of its own) copied into the columns ending at c. A
finished row only frees its slot; idle slots keep computing (one column of their own, masked from everything else).
When c reaches L, or a joining prompt is longer than c, the columns are shifted left or right at once ("compaction",
outside the step): rows end at c together, so one slice moves them all.

Only `cot` runs here (sampling's per-question draws need the live rows grouped; growing.py decodes it), and only
models whose every cache layer is a plain `StaticLayer` (no sliding windows).

Dimensions: R rows (slots), L cache columns, H kv heads, E head dim, V vocabulary, Q*N joining rows, P their width.
"""

from __future__ import annotations

import inspect

import torch
from transformers import StaticCache
from transformers.cache_utils import StaticLayer

from .kv import BranchCache, RowBatch, input_device, with_cache
from .rows import Row, pack


#: what StaticLayer.lazy_initialization takes: the keys and values (transformers >= 5), or the keys alone (4.x)
_INIT_ARGS = 2 if "value_states" in inspect.signature(StaticLayer.lazy_initialization).parameters else 1


class StaticRows:
    """R slots x L columns of KV cache, one write column `c` shared by every slot, and per slot its mask row, the
    token it feeds next and that token's position (all on the device, updated in place: a captured step reads them
    at fixed addresses). A row store of scheduler.schedule: its live rows are its occupied slots, in slot order."""

    def __init__(self, model, slots: int, columns: int, compiled: bool = False):
        self.model, self.columns, self.c = model, columns, 0
        self.free_slots = list(range(slots))
        self.occupied: dict[int, Row] = {}  # slot -> the branch decoding there
        self.rows: list[Row] = []
        """The occupied slots' rows, in slot order (scheduler.RowStore)."""
        self._slots: list[int] = []  # the slot of each of `rows`
        device = input_device(model)
        # Every step has the same shapes and reads its inputs and the cache at fixed addresses: compiled once, and on
        # a GPU captured as a CUDA graph ("reduce-overhead"), replayed each step with one launch.
        self.forward = torch.compile(model, mode="reduce-overhead" if device.type == "cuda" else None,
                                     dynamic=False) if compiled else model
        self.cache = StaticCache(config=model.config, max_cache_len=columns)
        self.mask = torch.zeros((slots, columns), dtype=torch.long, device=device)  # (R, L)
        self.feed = torch.zeros((slots, 1), dtype=torch.long, device=device)  # (R, 1)
        self.positions = torch.zeros((slots, 1), dtype=torch.long, device=device)  # (R, 1)
        self.live = torch.zeros((slots, 1), dtype=torch.long, device=device)  # (R, 1): 1 where a branch decodes
        self.lengths: dict[int, int] = {}
        """Per live slot, its own columns (prompt and fed tokens): the `lengths[s]` before c."""

    def place(self, joining: RowBatch, slots: list[int], first: torch.Tensor, prompt_lengths: list[int]) -> None:
        """Copy a prefill's rows (its cache and mask, (Q*N, H, P, E) and (Q*N, P)) into `slots`, ending at column c;
        `first` (Q*N,) are their first tokens, fed next at the position right after each prompt."""
        width = joining.width
        if width > self.c:
            self._shift(width)
        index = torch.tensor(slots, device=self.mask.device)
        for mine, theirs in zip(self.cache.layers, joining.cache.layers):
            if mine.keys is None:  # allocated on the first prefill's device and dtype, per layer
                shape = (self.mask.shape[0], *theirs.keys.shape[1:])
                mine.lazy_initialization(*[theirs.keys.new_zeros(shape), theirs.values.new_zeros(shape)][:_INIT_ARGS])
            rows = index.to(mine.keys.device)  # a layer's own device (a model split over GPUs)
            mine.keys[rows, :, self.c - width: self.c] = theirs.keys
            mine.values[rows, :, self.c - width: self.c] = theirs.values
        self.mask[index] = 0
        self.mask[index, self.c - width: self.c] = joining.mask
        self.feed[index, 0] = first
        self.positions[index, 0] = torch.tensor(prompt_lengths, device=self.mask.device)
        self.live[index] = 1
        self.lengths.update(zip(slots, prompt_lengths))

    def room(self) -> int:
        return len(self.free_slots)

    def admit(self, joining: RowBatch, new_rows: list[Row], first: torch.Tensor) -> None:
        taken, self.free_slots = self.free_slots[:len(new_rows)], self.free_slots[len(new_rows):]
        self.place(joining, taken, first, [row.prompt_length for row in new_rows])
        self.occupied.update(zip(taken, new_rows))
        self._order()

    def snapshot(self, index: int, length: int) -> BranchCache:
        return self.snapshot_slot(self._slots[index], self.rows[index].prompt_length, length)

    def release(self, indices: list[int]) -> None:
        for index in indices:
            slot = self._slots[index]
            del self.occupied[slot]
            self.free(slot)
            self.free_slots.append(slot)
        self.free_slots.sort()  # questions take the lowest free slots, as they always have
        self._order()

    def step(self, config, generators: dict) -> torch.Tensor:
        """One greedy token for every slot (`cot` only: static rows never sample), fed back in place: (R, 6)."""
        logits = self.forward_step()  # (R, V)
        probs = logits.softmax(-1)
        self.feed[:, 0] = probs.argmax(-1)
        return pack(self.feed[:, 0], probs, logits)

    def live_index(self) -> torch.Tensor:
        return torch.tensor(self._slots, device=self.mask.device)

    def _order(self) -> None:
        self._slots = sorted(self.occupied)
        self.rows = [self.occupied[slot] for slot in self._slots]

    def forward_step(self) -> torch.Tensor:
        """One token for every slot, written at column c: (R, V) float32 logits of the next token."""
        if self.c == self.columns:
            self._shift(max(self.lengths.values(), default=0))
        self.mask[:, self.c] = 1  # each slot attends to the token it feeds (an idle one to that alone)
        for layer in self.cache.layers:
            if hasattr(layer, "cumulative_length"):  # transformers >= 5 writes there; older ones at cache_position
                layer.cumulative_length.fill_(self.c)
        out = self.forward(input_ids=self.feed, attention_mask=self.mask, position_ids=self.positions,
                           use_cache=True, cache_position=torch.tensor([self.c], device=self.mask.device),
                           **with_cache(self.model, self.cache))
        self.c += 1
        self.positions += self.live  # an idle slot stays at position 0
        self.lengths = {slot: length + 1 for slot, length in self.lengths.items()}
        return out.logits[:, -1].float()

    def snapshot_slot(self, slot: int, prompt_length: int, length: int) -> BranchCache:
        """Slot `slot`'s first `length` own columns (prompt and fed tokens), copied out."""
        start = self.c - self.lengths[slot]
        return BranchCache(prompt_length,
                           [layer.keys[slot, :, start: start + length].clone() for layer in self.cache.layers],
                           [layer.values[slot, :, start: start + length].clone() for layer in self.cache.layers])

    def free(self, slot: int) -> None:
        self.mask[slot] = 0
        self.live[slot] = 0
        self.positions[slot] = 0
        del self.lengths[slot]

    def _shift(self, new_c: int) -> None:
        """Move every slot's own columns (all end at c) to end at `new_c`: left when c reached L, right for a
        prompt wider than c. One slice of the widest row moves them all; the columns it leaves are masked."""
        if new_c >= self.columns:
            raise RuntimeError(f"static decoding needs {new_c + 1} cache columns but has {self.columns}")
        width = min(max(self.lengths.values(), default=0), self.c, new_c)
        source, target = slice(self.c - width, self.c), slice(new_c - width, new_c)
        for layer in self.cache.layers:
            if layer.keys is not None:
                layer.keys[:, :, target] = layer.keys[:, :, source].clone()
                layer.values[:, :, target] = layer.values[:, :, source].clone()
        kept = self.mask[:, source].clone()
        self.mask.zero_()
        self.mask[:, target] = kept
        self.c = new_c


def check_static_mode(mode: str) -> None:
    """Static rows decode `cot` only (LoverConfig checks this from model_args, before a model loads)."""
    if mode != "cot":
        raise ValueError(f"static_cache=true decodes decoding=cot only, not decoding={mode}: sampling's "
                         "per-question draws need the live rows grouped; drop static_cache=true.")


def check_static(model, mode: str) -> None:
    """Refuse, naming why, what static rows cannot decode (before any decoding)."""
    check_static_mode(mode)
    kinds = {type(layer).__name__ for layer in StaticCache(config=model.config, max_cache_len=1).layers}
    if kinds != {StaticLayer.__name__}:
        raise ValueError(f"static_cache=true needs plain cache layers, but {type(model).__name__} has "
                         f"{sorted(kinds)} (a sliding window keeps other columns than ours); drop static_cache=true.")


def static_columns(prompts: list[list[int]], max_new_tokens: int) -> int:
    """L, the cache columns of static rows: twice the longest prompt plus budget, so that compaction is rare."""
    return 2 * (max(len(p) for p in prompts) + max_new_tokens + 1)
