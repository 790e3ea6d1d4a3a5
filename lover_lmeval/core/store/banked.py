"""Reading a bank is an engine too: banked questions come back from the bank, the others from the engine it wraps.

`BankedEngine` puts a branch bank in front of a decoding engine (decode/engine.py), so the pipeline has one path from
prompts to branches whether they were decoded now, read back, or both. With `bank_only` there is no engine behind
it: a question missing from the bank is refused before anything is decoded. Writing is the pipeline's: it banks a
question once its branches are complete (an engine that decodes tokens only leaves the statistics to the pipeline's
pass over them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..decode.engine import Decoded, Engine, RunSpec
from .bank import BranchBank, NotInBank


class BankedEngine:
    """`bank` in front of `inner` (None: bank_only). `keys(prompts, spec)` are the prompts' record keys."""

    def __init__(self, bank: BranchBank, inner: Engine | None,
                 keys: Callable[[list[list[int]], RunSpec], list[str]], name: str = "hf"):
        self.bank, self.inner, self.keys = bank, inner, keys
        self.name = inner.name if inner is not None else name

    def decode(self, prompts: list[list[int]], spec: RunSpec) -> Iterator[Decoded]:
        """The banked questions first, read back (no KV cache); then the inner engine's, as it hands them over."""
        keys = self.keys(prompts, spec)
        todo = [i for i, key in enumerate(keys) if key not in self.bank]
        if todo and self.inner is None:
            raise NotInBank(f"{len(todo)} of {len(prompts)} questions are not in the bank {self.bank.path} "
                            f"({len(self.bank)} records) and bank_only=true forbids decoding them; check the bank "
                            "path, task, limit and generation settings, or drop bank_only to decode them.")
        missing = set(todo)
        for i, key in enumerate(keys):
            if i not in missing:
                yield Decoded(i, self.bank.get(key), fresh=False)
        if todo:
            for decoded in self.inner.decode([prompts[i] for i in todo], spec):
                yield decoded._replace(q=todo[decoded.q])
