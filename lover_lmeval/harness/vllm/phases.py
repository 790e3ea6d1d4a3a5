"""lover_vllm in `phases` (harness/vllm/memory_plan.py says when): vLLM decodes every question first, is freed, then the HF
copy loads and reads the branches; the two copies of the weights are never in memory together.

`PhasedEngine` is the pipeline's engine in phases. Until the HF copy loads, the pipeline reads with a copy on
PyTorch's meta device (no memory: the config's shapes and dtype, all the pipeline reads before its pass). Phase 1
(`stage`) decodes each request group's prompts that neither the bank nor the staging store holds with vLLM, chunk by
chunk, and stages each chunk's branches on disk as it returns (`staging_path`: a SQLite bank in the cache folder, by
the same keys as the run's bank), so a kill loses at most the chunk in flight and the same command decodes only the
rest. The engine is then freed and the HF copy handed to the pipeline (`Pipeline.read_with`). Phase 2 is the
pipeline's usual path: `decode` hands each staged question over as if decoded now, so the pipeline completes it
(margins, statistics, features) and banks it exactly as beside does, and the rows are beside's. Once a call's
questions are complete their staged records are discarded (`discard_staged`). A later call decodes again: the HF copy
gives way to a restarted engine first.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from ...core.decode.engine import Decoded, Engine, RunSpec
from ...core.loading import cache_dir
from ...log import log
from ...core.store.bank import BranchBank


def staging_path() -> Path:
    """Phase 1's store: one SQLite bank in the cache folder for every run (its keys name the model, the prompt and
    every setting, so runs never read each other's questions, and concurrent runs write it safely)."""
    return cache_dir() / "vllm_staged.sqlite"


def release_memory() -> None:
    """Return what a dropped copy or engine held (the allocator's cached blocks too, on a GPU)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class PhasedEngine:
    """The engine of a pipeline in phases: `vllm` (a `VLLMEngine` or its replicas) decodes in `stage`, then
    `decode` serves the staged branches. `start()` starts vLLM's engine if it is not running, `free()` shuts it
    down, `load_copy()` loads the HF copy; `skeleton` is the copy on the meta device the pipeline reads with while
    vLLM holds the memory."""

    def __init__(self, vllm: Engine, start: Callable[[], None], free: Callable[[], None],
                 load_copy: Callable[[], torch.nn.Module], skeleton: torch.nn.Module):
        self.vllm, self.start, self.free, self.load_copy, self.skeleton = vllm, start, free, load_copy, skeleton
        self.name = vllm.name
        self.staged_keys: list[str] = []
        """The current call's staged questions (`discard_staged` removes them once the call's questions are done)."""
        self.keys: Callable[[list[list[int]], RunSpec], list[str]] | None = None
        """The pipeline's record keys, by which the staged branches are stored and found (set by `stage`)."""

    def stage(self, pipeline, groups: list[tuple[list[list[int]], RunSpec]]) -> None:
        """Phase 1 and the switch: every group's prompts that neither the bank nor the staging bank holds decoded by
        vLLM and staged as each chunk returns (none with bank_only: nothing may be decoded, the bank serves every
        question or says which not), the engine freed, the HF copy handed to `pipeline`."""
        if pipeline.model is not self.skeleton:  # an earlier call loaded the copy: it gives way to the engine
            pipeline.read_with(self.skeleton)
            release_memory()
        self.keys = pipeline.record_keys
        staged = BranchBank(staging_path())
        self.staged_keys = []
        work = []  # (prompts still to decode with their keys, spec) per group
        for prompts, spec in groups if not pipeline.config.bank.bank_only else ():
            keys = pipeline.record_keys(prompts, spec)
            unbanked = [(p, k) for p, k in zip(prompts, keys) if pipeline.bank is None or k not in pipeline.bank]
            todo = [(p, k) for p, k in unbanked if k not in staged]
            log.info("lover_vllm phases, 1 of 2: vLLM decodes %d questions (%d staged by an earlier run, %d read from "
                     "the bank later), staged in %s as each chunk returns", len(todo), len(unbanked) - len(todo),
                     len(prompts) - len(unbanked), staged.path)
            self.staged_keys += [k for _, k in unbanked]
            work.append((todo, spec))
        if any(todo for todo, _ in work):
            self.start()
        for todo, spec in work:
            for decoded in self.vllm.decode([p for p, _ in todo], spec):
                prompt, key = todo[decoded.q]
                staged.add(key, decoded.branches, prompt_ids=prompt)
        self.free()
        release_memory()
        log.info("lover_vllm phases, 2 of 2: the engine is freed; the HF copy loads and reads %d questions' branches",
                 len(self.staged_keys))
        pipeline.read_with(self.load_copy())

    def decode(self, prompts: list[list[int]], spec: RunSpec) -> Iterator[Decoded]:
        """Phase 2: each question's staged branches, handed over fresh (the pipeline completes and banks them), as
        often as a prompt recurs."""
        staged = BranchBank(staging_path())
        for q, key in enumerate(self.keys(prompts, spec) if self.keys is not None else [None] * len(prompts)):
            branches = staged.get(key) if key is not None else None
            if branches is None:
                raise RuntimeError(f"a question reached the HF copy without branches from phase 1 in {staged.path}: "
                                   "lover_vllm's phases decode every request group before reading any; report this.")
            yield Decoded(q, branches)

    def discard_staged(self) -> None:
        """Once a call's questions are complete (banked, when the run has a bank), their staged records go: a kill
        before this leaves them for the rerun."""
        if self.staged_keys:
            BranchBank(staging_path()).discard(self.staged_keys)
        self.staged_keys = []
