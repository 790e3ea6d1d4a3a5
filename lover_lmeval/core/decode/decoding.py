"""N-branch decoding's settings: what is decoded (`DecodingConfig`), how questions share the batch (`BatchingConfig`).

CoT-decoding (top-N first tokens, then greedy), sampling, or beam search (beam.py). Each question's prompt is prefilled
once; its KV cache is then repeated for the N branches, which continue in one batch (engine.HFEngine runs
scheduler.py's loop over growing.py's or static.py's rows). A branch stops on its own (stop string, EOS or the token
budget) and leaves the batch at once; its slice of the KV cache is kept so that the assertion features (features.py)
can be computed on top of it without re-encoding question and solution. With a row budget (`max_rows`), the next
questions join the running batch as soon as their N rows are free (continuous batching). Each token comes with its
margin and its token_stats, computed on the device from the step's logits; they reach the host with the tokens, one
transfer per block of steps (`BatchingConfig.sync_every`).
"""

from __future__ import annotations

from dataclasses import dataclass

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
    columns: int | None = None
    """With `static_cache`: L, the static cache's columns; None: static.static_columns (twice the longest prompt plus
    the budget, so that compaction is rare). Not a model_arg: tests set the least that decodes (longest prompt +
    budget + 1), so that the columns are compacted again and again."""

    def __post_init__(self):
        if self.max_rows is not None:
            self.max_rows = int(self.max_rows)
            if self.max_rows < 1:
                raise ValueError(f"max_rows={self.max_rows} must be >= 1 (e.g. max_rows=50), or omitted.")
        if self.columns is not None:
            self.columns = int(self.columns)
            if self.columns < 1:
                raise ValueError(f"columns={self.columns} must be >= 1, or omitted (static.static_columns).")
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
