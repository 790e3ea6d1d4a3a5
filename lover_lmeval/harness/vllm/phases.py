"""lover_vllm in `phases` (harness/vllm/memory_plan.py says when): vLLM decodes every question first, is freed, then the HF
copy loads and reads the branches; the two copies of the weights are never in memory together.

Until the HF copy loads, the pipeline holds a copy on PyTorch's meta device (no memory: the config's shapes and
dtype, all the pipeline reads before its pass). Phase 1 (`decode_first`) decodes each request group's prompts that
neither the bank nor the staging store holds with vLLM, chunk by chunk, and stages each chunk's branches on disk as
it returns (`staging_path`: a SQLite bank in the cache folder, by the same keys as the run's bank), so a kill loses at
most the chunk in flight and the same command decodes only the rest. The engine is then shut down and the HF copy
loaded in its place. Phase 2 is lover_vllm's usual path with a `StagedEngine` behind the bank: each staged question
comes back as if decoded now, so the pipeline completes it (margins, statistics, features) and banks it exactly as
beside does, and the rows are beside's. Once a call's questions are complete their staged records are discarded
(`discard_staged`). A later call decodes again: the HF copy gives way to a restarted engine first.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from ...core.decode.engine import Decoded, RunSpec
from ...core.loading import cache_dir
from ...log import log
from ...core.store.bank import BranchBank
from ...core.store.banked import BankedEngine


def staging_path() -> Path:
    """Phase 1's store: one SQLite bank in the cache folder for every run (its keys name the model, the prompt and
    every setting, so runs never read each other's questions, and concurrent runs write it safely)."""
    return cache_dir() / "vllm_staged.sqlite"


class StagedEngine:
    """Phase 1's branches from the staging bank by key, handed over fresh (the pipeline completes and banks them), as
    often as a prompt recurs. `keys(prompts, spec)` are the pipeline's record keys; `name` the engine's that decoded
    them."""

    def __init__(self, name: str, keys: Callable[[list[list[int]], RunSpec], list[str]], staged: BranchBank):
        self.name, self.keys, self.staged = name, keys, staged

    def decode(self, prompts: list[list[int]], spec: RunSpec) -> Iterator[Decoded]:
        for q, key in enumerate(self.keys(prompts, spec)):
            branches = self.staged.get(key)
            if branches is None:
                raise RuntimeError(f"a question reached the HF copy without branches from phase 1 in {self.staged.path}"
                                   ": lover_vllm's phases decode every request group before reading any; report this.")
            yield Decoded(q, branches)


def free_engine(lm) -> None:
    """Shut vLLM's engine down, or its data-parallel replicas (their processes exit, their memory with them)."""
    if hasattr(lm.vllm_engine, "shutdown"):
        lm.vllm_engine.shutdown()
    llm = getattr(lm, "model", None)
    if llm is None:
        return
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None:
        core.shutdown()
    lm.model = None
    del llm, core
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def swap_reader(lm, model) -> None:
    """Make `model` the copy the pipeline reads with (the real one, or the meta skeleton), its feature cache keyed
    by the new copy's device as Pipeline keys it."""
    pipeline = lm.pipeline
    old, pipeline.model = pipeline.model, model
    if pipeline.feature_cache is not None:
        pipeline.feature_cache.salt = f"{model.dtype}/{model.device.type}"
    lm.hf_model = model
    del old
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def decode_first(lm, groups: list[tuple[list[str], dict]]) -> None:
    """Phase 1 and the switch: every group's prompts that neither the bank nor the staging bank holds decoded by vLLM
    and staged as each chunk returns (none with bank_only: nothing may be decoded, the bank serves every question or
    says which not), the engine freed, the HF copy loaded behind a `StagedEngine`. The call's staged keys are kept in
    `lm.staged_keys` for `discard_staged`."""
    pipeline = lm.pipeline
    decoding = not pipeline.config.bank.bank_only
    if pipeline.model is not lm.skeleton:  # an earlier call loaded the copy: it gives way to the engine
        swap_reader(lm, lm.skeleton)
    staged = BranchBank(staging_path())
    lm.staged_keys = []
    work = []  # (prompts still to decode with their keys, spec) per group
    for contexts, gen_kwargs in groups if decoding else ():
        prompts, spec = lm.prompts(contexts, gen_kwargs)
        keys = pipeline.record_keys(prompts, spec)
        unbanked = [(p, k) for p, k in zip(prompts, keys) if pipeline.bank is None or k not in pipeline.bank]
        todo = [(p, k) for p, k in unbanked if k not in staged]
        log.info("lover_vllm phases, 1 of 2: vLLM decodes %d questions (%d staged by an earlier run, %d read from the "
                 "bank later), staged in %s as each chunk returns", len(todo), len(unbanked) - len(todo),
                 len(prompts) - len(unbanked), staged.path)
        lm.staged_keys += [k for _, k in unbanked]
        work.append((todo, spec))
    if any(todo for todo, _ in work) and getattr(lm, "model", None) is None and lm.data_parallel_size <= 1:
        lm.start_engine()  # (data parallel: the replicas start as they decode)
    for todo, spec in work:
        for decoded in lm.vllm_engine.decode([p for p, _ in todo], spec):
            prompt, key = todo[decoded.q]
            staged.add(key, decoded.branches, prompt_ids=prompt)
    free_engine(lm)
    log.info("lover_vllm phases, 2 of 2: the engine is freed; the HF copy loads and reads %d questions' branches",
             len(lm.staged_keys))
    swap_reader(lm, lm.load_copy())
    reader = StagedEngine(lm.vllm_engine.name, pipeline.record_keys, staged)
    if isinstance(pipeline.engine, BankedEngine):
        pipeline.engine.inner = reader if decoding else None
    else:
        pipeline.engine = reader


def discard_staged(lm) -> None:
    """Once a call's questions are complete (banked, when the run has a bank), their staged records go: a kill before
    this leaves them for the rerun."""
    keys = getattr(lm, "staged_keys", None)
    if keys:
        BranchBank(staging_path()).discard(keys)
    lm.staged_keys = []
