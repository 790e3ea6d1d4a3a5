"""The scheduler's default row store, `GrowingRows`: every live row in one kv.RowBatch whose KV cache grows a column a
step; any decoding mode.

A question's prefill (rows.prefill: its prompt once, the cache repeated for its N branches) joins by concatenation
(`admit`); a step feeds each row its last token at its own position and chooses the next (sampling.next_tokens);
finished rows leave at once (`release`). Every step may thus change the batch's shapes; static.py's `StaticRows`
keeps them fixed instead (`cot`, a CUDA graph can capture its step).

Dimensions: A rows decoding, V vocabulary.
"""

from __future__ import annotations

import torch

from .decoding import DecodingConfig
from .kv import BranchCache, RowBatch, with_cache
from .rows import Row, pack
from .sampling import next_tokens


class GrowingRows:
    """The scheduler's default row store: the batch's KV cache grows one column a step (kv.RowBatch); finished rows
    leave it and joining questions' rows are concatenated, so every step may change its shapes. Any decoding mode."""

    def __init__(self, model, max_rows: int):
        self.model, self.max_rows = model, max_rows
        self.rows: list[Row] = []
        self.batch: RowBatch | None = None
        self.feed = self.positions = None  # (A,) on the device: the token each row feeds next, and its position

    def room(self) -> int:
        if self.rows and not self.batch.can_extend():
            return 0
        return self.max_rows - len(self.rows)

    def admit(self, joining: RowBatch, new_rows: list[Row], first: torch.Tensor) -> None:
        # Each new row next feeds its first token, at the position right after its prompt.
        position = torch.tensor([row.prompt_length for row in new_rows], device=first.device)
        if self.rows:
            self.batch.extend(joining)  # copies: `joining`'s own cache must not outlive the admission
            self.feed, self.positions = torch.cat([self.feed, first]), torch.cat([self.positions, position])
        else:
            self.batch, self.feed, self.positions = joining, first, position
        self.rows += new_rows

    def snapshot(self, index: int, length: int) -> BranchCache:
        return self.batch.snapshot(index, self.rows[index].prompt_length, length)

    def release(self, indices: list[int]) -> None:
        ended = set(indices)
        keep = [i for i in range(len(self.rows)) if i not in ended]
        self.batch.select(keep)
        index = torch.tensor(keep, dtype=torch.long, device=self.feed.device)
        self.feed, self.positions = self.feed[index], self.positions[index]
        self.rows = [self.rows[i] for i in keep]

    def step(self, config: DecodingConfig, generators: dict) -> torch.Tensor:
        out = self.model(input_ids=self.feed[:, None], attention_mask=self.batch.grow(),
                         position_ids=self.positions[:, None], use_cache=True,
                         **with_cache(self.model, self.batch.cache))  # (A, 1) each
        logits = out.logits[:, -1].float()  # (A, V); a no-op for a float32 model
        probs = logits.softmax(-1)
        self.feed, self.positions = next_tokens(probs, self.rows, config, generators), self.positions + 1
        return pack(self.feed, probs, logits)  # (A, 6)

    def live_index(self) -> None:
        return None
