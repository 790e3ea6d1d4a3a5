"""How the pipeline gets branches: an `Engine` decodes prompts as a `RunSpec` asks and hands each question over whole.

The pipeline calls `engine.decode(prompts, spec)` and never looks behind it. Three engines exist: `HFEngine` (the
transformers model: scheduler.py's loop over growing or static rows, or `beam`'s generate; the one way into HF
decoding, tests and benchmarks included, which collect it with `decode_all`), the bank
(store/banked.py: banked questions read, the others passed to the engine it wraps, or refused with `bank_only`), and
vLLM's (`lover_vllm`). An engine that cannot keep a KV cache per branch yields none; the pipeline then runs
the branches' tokens through the HF model once, for their features and whatever statistics they lack.

Dimensions: Q questions, N branches per question.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch

from .branch import Branch
from .beam import iter_beam
from .decoding import BatchingConfig, DecodingConfig
from .growing import GrowingRows
from .kv import BranchCache
from .scheduler import RowStore, schedule
from .static import StaticRows, check_static, static_columns


@dataclass(frozen=True)
class RunSpec:
    """What one call of the pipeline asks of its engine: built once where lm-eval's request arrives (the generation
    kwargs resolved against model_args, harness/generation.py) and passed down unchanged."""

    decoding: DecodingConfig
    """How the N branches are decoded: the mode and its parameters."""
    until: tuple[str, ...]
    """Stop strings: a branch ends at the first one, and its text is cut there (as lm-eval's HFLM cuts)."""
    max_gen_toks: int
    """Token budget of one branch."""
    max_rows: int | None = None
    """Rows decoded together (questions x N, lm-eval's batch size times N unless model_args set max_rows); None:
    every question at once."""
    stats: bool = True
    """Whether the results need per-token statistics (the 2025 selectors read them): banked branches decoded before
    they existed then get them from a pass through the whole model. `lover train` reads features only."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "until", tuple(self.until))
        if int(self.max_gen_toks) < 1:
            raise ValueError(f"max_gen_toks={self.max_gen_toks} must be >= 1 (e.g. max_gen_toks=256).")
        if self.max_rows is not None and self.max_rows < self.decoding.n_branches:
            raise ValueError(f"max_rows={self.max_rows} is fewer than n_branches={self.decoding.n_branches}: a "
                             f"question's branches decode together; use max_rows >= {self.decoding.n_branches}.")


class Decoded(NamedTuple):
    """One question's branches, as an engine hands them over."""

    q: int
    """Index of the question in the prompts given to `decode`."""
    branches: list[Branch]
    caches: list[BranchCache] | None = None
    """Each branch's KV cache (prompt and kept tokens) for features on top of it; None: the pipeline re-reads the
    tokens (a bank, an engine with no HF cache)."""
    fresh: bool = True
    """Decoded now (the pipeline banks it), not read back from a bank."""


#: every engine's name, as bank keys carry it: the HF model's (lover_hf) and vLLM's (lover_vllm)
ENGINES = ("hf", "vllm")


class Engine(Protocol):
    """What decodes: the pipeline's one path from prompts to branches."""

    name: str
    """Which engine decoded a record: part of its bank key unless "hf" (the keys banks were written with), so that a
    bank never mixes engines silently."""

    def decode(self, prompts: list[list[int]], spec: RunSpec) -> Iterator[Decoded]:
        """Every prompt's N branches, each question as soon as its own are done (any order)."""


def eos_ids(model, tokenizer) -> set[int]:
    """The token ids that end a branch: the tokenizer's EOS and every one the model's generation config names."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured] if configured is not None else [])
    return ids


class HFEngine:
    """The transformers model decodes: scheduler.schedule over growing rows (any mode) or static rows
    (`static_cache`, `cot`), or `beam`'s generate. The one way into HF decoding: `spec` says what to decode (mode,
    stop strings, budget, row budget), `batching` how the rows run (continuous, sync_every, static_cache,
    compile_step, columns)."""

    name = "hf"

    def __init__(self, model, tokenizer, batching: BatchingConfig | None = None, eos: set[int] | None = None):
        """`eos`: the token ids that end a branch; None: the tokenizer's and the model's (`eos_ids`). Tests pass
        their own, to end branches at tokens they chose."""
        self.model, self.tokenizer = model, tokenizer
        self.batching = batching or BatchingConfig()
        pad_id = tokenizer.pad_token_id
        self.pad_id = pad_id if pad_id is not None else tokenizer.eos_token_id
        self.eos_ids = eos_ids(model, tokenizer) if eos is None else set(eos)

    @torch.inference_mode()  # no autograd graph: beam's extra pass too (the scheduler's loop has its own)
    def decode(self, prompts: list[list[int]], spec: RunSpec) -> Iterator[Decoded]:
        config = spec.decoding
        if config.mode == "beam":  # generate's beams, all prompts at once (beam.py)
            for q, branches, caches in iter_beam(self.model, self.tokenizer, prompts, config, spec.max_gen_toks,
                                                 list(spec.until), self.eos_ids, self.pad_id):
                yield Decoded(q, branches, caches)
                del branches, caches
            return
        rows = spec.max_rows or len(prompts) * config.n_branches
        # Continuous batching: one pass, questions joining as rows free up; without, batches of as many questions
        # as the rows hold, each decoded to its longest branch.
        per_call = len(prompts) if self.batching.continuous else rows // config.n_branches
        for start in range(0, len(prompts), per_call or 1):
            chunk = prompts[start: start + per_call]
            store = row_store(self.model, chunk, config.mode, spec.max_gen_toks, rows, self.batching)
            for q, branches, caches in schedule(store, self.model, self.tokenizer, chunk, config, spec.max_gen_toks,
                                                list(spec.until), self.eos_ids, self.pad_id,
                                                self.batching.steps_between_syncs(config.mode)):
                yield Decoded(start + q, branches, caches)
                del branches, caches  # the consumer's now: held here, they would outlive its features


def row_store(model, prompts: list[list[int]], mode: str, max_new_tokens: int, rows: int,
              batching: BatchingConfig) -> RowStore:
    """The scheduler's rows for these prompts: static ones with `batching.static_cache` (refused, naming why, for a
    mode or model they cannot decode; `batching.columns` columns, else `static_columns`), else growing ones."""
    if not batching.static_cache:
        return GrowingRows(model, rows)
    check_static(model, mode)
    return StaticRows(model, rows, batching.columns or static_columns(prompts, max_new_tokens), batching.compile_step)


def decode_all(engine: Engine, prompts: list[list[int]], spec: RunSpec
               ) -> tuple[list[list[Branch]], list[list[BranchCache] | None]]:
    """`engine.decode` collected: every prompt's branches and caches, in prompt order (tests and benchmarks; the
    pipeline consumes the iterator, so that caches are freed question by question)."""
    branches: list = [None] * len(prompts)
    caches: list = [None] * len(prompts)
    for decoded in engine.decode(prompts, spec):
        branches[decoded.q], caches[decoded.q] = decoded.branches, decoded.caches
    return branches, caches
