"""N-branch decoding's settings (`DecodingConfig`, `BatchingConfig`) and its default row store (`GrowingRows`).

CoT-decoding (top-N first tokens, then greedy), sampling, or beam search (beam.py). Each question's prompt is prefilled
once; its KV cache is then repeated for the N branches, which continue in one batch (scheduler.py runs the loop). A
branch stops on its own (stop string, EOS or the token budget) and leaves the batch at once; its slice of the KV cache
is kept so that the assertion features (features.py) can be computed on top of it without re-encoding question and
solution. With a row budget (`max_rows`), the next questions join the running batch as soon as their N rows are free
(continuous batching, kv.RowBatch). Each token comes with its margin and its token_stats, computed on the device from
the step's logits; they reach the host with the tokens, one transfer per block of steps (`BatchingConfig.sync_every`).

Dimensions: Q questions, N branches per question, A rows decoding, P padded prompt length, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .beam import iter_beam
from .branch import Branch
from .kv import BranchCache, RowBatch, with_cache
from .rows import Row, pack
from .sampling import next_tokens
from .scheduler import schedule
from .static import StaticRows, check_static, static_columns

#: The decoding modes, and what each one's branch 0 is: the `greedy` row scores it, a greedy decode with `cot` only.
BRANCH_ZERO = {"cot": "the plain greedy decode", "sample": "one sampled path", "beam": "the top beam"}
MODES = tuple(BRANCH_ZERO)


@dataclass
class DecodingConfig:
    n_branches: int = 10
    """N, solutions per question. With `cot`, branch k starts with the k-th most likely first token."""
    mode: str = "cot"
    """`cot` (CoT-decoding: top-N first tokens, then greedy), `sample` (temperature / top-p), `beam`."""
    temperature: float = 0.7
    """Sampling temperature (`sample` only)."""
    top_p: float = 0.95
    """Nucleus mass kept when sampling (`sample` only)."""
    seed: int = 1234
    """Seed of the sampling (`sample` only): each question draws from its own generator, seeded from this seed and
    its prompt (`question_seed`), so its branches do not depend on its batch-mates. The other modes are
    deterministic."""

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"decoding={self.mode!r} is not supported; use one of {', '.join(MODES)}.")
        if int(self.n_branches) < 1:
            raise ValueError(f"n_branches={self.n_branches} must be >= 1 (e.g. n_branches=10).")
        self.n_branches = int(self.n_branches)
        if self.mode == "sample" and not self.temperature > 0:  # the other modes never read it
            raise ValueError(f"temperature={self.temperature:g} must be > 0 for decoding=sample (e.g. 0.7).")
        if self.mode == "sample" and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p:g} must be in (0, 1] for decoding=sample (e.g. 0.95).")


@dataclass
class BatchingConfig:
    """How questions share the decoding batch. Not part of a bank record's key: it changes how fast branches come,
    not which. Each row attends to its own tokens only, so which rows share a step moves float rounding alone, as
    batching always has: token-identical in float32; in half precision that rounding can flip a near-tie and change
    a branch (benchmarks/runs/perf3_continuous_batching.md: 76 of 100 bf16 branches identical)."""

    continuous: bool = True
    """Refill a finished question's rows with the next question's branches (continuous batching). Off: batches of
    `max_rows` // N questions (`batch_size` by default), each living until its longest branch ends."""
    max_rows: int | None = None
    """Rows decoded together; default lm-eval's `batch_size` x n_branches. At least n_branches; questions join
    whole, so a budget that is not a multiple of n_branches leaves its remainder unused."""
    sync_every: int = 8
    """Decoding steps between two transfers of the new tokens (with their margins and statistics) to the host, where
    EOS and stop strings are checked. Every transfer waits for the device: on a GPU it drains the launch queue each
    step. A row that ends inside a block is decoded on to the block's end (no row passes its token budget) and cut
    where it ended: branches, margins, statistics and KV caches are the same for every value. Finished rows leave the
    batch at block ends, so the cache is re-indexed up to K times less often (docs/usage.md gives the measured gains).
    Sampling transfers every step whatever the value: a question's draws depend on which of its rows are still
    decoding."""
    static_cache: bool = False
    """Decode on fixed rows (static.py): a preallocated KV cache of max_rows rows, whose shapes no step changes, so
    that a step can be captured as a CUDA graph; questions join in place. `cot` only, and models whose cache layers
    are plain (no sliding windows). Same branches as the default growing batch (float32)."""
    compile_step: bool = False
    """With `static_cache`: the step through `torch.compile`, on a GPU as a CUDA graph (mode "reduce-overhead"),
    replayed with one launch a step instead of hundreds of small kernels. The first steps compile (tens of seconds
    to minutes); worth it for long runs only."""

    def __post_init__(self):
        if self.max_rows is not None:
            self.max_rows = int(self.max_rows)
            if self.max_rows < 1:
                raise ValueError(f"max_rows={self.max_rows} must be >= 1 (e.g. max_rows=50), or omitted.")
        self.sync_every = int(self.sync_every)
        if self.sync_every < 1:
            raise ValueError(f"sync_every={self.sync_every} must be >= 1 (e.g. sync_every=8), or omitted.")

    def rows(self, batch_size: int, n_branches: int) -> int:
        """The row budget for lm-eval's `batch_size` questions of N branches."""
        rows = self.max_rows if self.max_rows is not None else batch_size * n_branches
        if rows < n_branches:
            raise ValueError(f"max_rows={rows} is fewer than n_branches={n_branches}: a question's branches "
                             f"decode together; use max_rows >= {n_branches}.")
        return rows

    def steps_between_syncs(self, mode: str) -> int:
        """`sync_every` for decoding in `mode` (sampling: 1)."""
        return self.sync_every if mode == "cot" else 1


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


def decode_branches(model, tokenizer, prompts: list[list[int]], config: DecodingConfig, max_new_tokens: int,
                    stop: list[str], eos_ids: set[int], pad_id: int, max_rows: int | None = None,
                    sync_every: int = BatchingConfig.sync_every, static_cache: bool = False,
                    compile_step: bool = False) -> tuple[list[list[Branch]], list[list[BranchCache]]]:
    """`iter_branches` collected: every prompt's branches and caches, in prompt order (tests and benchmarks; the
    pipeline consumes the iterator, so that caches are freed question by question)."""
    branches: list = [None] * len(prompts)
    caches: list = [None] * len(prompts)
    for q, q_branches, q_caches in iter_branches(model, tokenizer, prompts, config, max_new_tokens, stop, eos_ids,
                                                 pad_id, max_rows, sync_every, static_cache, compile_step):
        branches[q], caches[q] = q_branches, q_caches
    return branches, caches


@torch.inference_mode()
def iter_branches(model, tokenizer, prompts: list[list[int]], config: DecodingConfig, max_new_tokens: int,
                  stop: list[str], eos_ids: set[int], pad_id: int, max_rows: int | None = None,
                  sync_every: int = BatchingConfig.sync_every, static_cache: bool = False,
                  compile_step: bool = False) -> Iterator[tuple[int, list[Branch], list[BranchCache]]]:
    """Decode N branches for each of Q prompts (lists of token ids); yield `(q, branches, caches)` for prompt q as
    soon as its N branches are done: scheduler.schedule over growing rows, or static rows with `static_cache`
    (BatchingConfig's fields, loose for the tests and benchmarks that call this directly), or `beam`'s generate.
    At most `max_rows` rows (default: all prompts at once) decode together; a budget below one question's N rows
    is refused before any decoding."""
    if config.mode == "beam":
        yield from iter_beam(model, tokenizer, prompts, config, max_new_tokens, stop, eos_ids, pad_id)
        return
    if not prompts:
        return
    batching = BatchingConfig(max_rows=max_rows, sync_every=sync_every, static_cache=static_cache,
                              compile_step=compile_step)
    rows = batching.rows(len(prompts), config.n_branches)
    store = row_store(model, prompts, config.mode, max_new_tokens, rows, batching)
    yield from schedule(store, model, tokenizer, prompts, config, max_new_tokens, stop, eos_ids, pad_id,
                        batching.steps_between_syncs(config.mode))


def row_store(model, prompts: list[list[int]], mode: str, max_new_tokens: int, rows: int, batching: BatchingConfig):
    """The scheduler's rows for these prompts: static ones with `batching.static_cache` (refused, naming why, for a
    mode or model they cannot decode), else growing ones."""
    if not batching.static_cache:
        return GrowingRows(model, rows)
    check_static(model, mode)
    return StaticRows(model, rows, static_columns(prompts, max_new_tokens), batching.compile_step)
