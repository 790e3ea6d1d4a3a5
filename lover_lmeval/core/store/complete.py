"""The store-side step between an engine and the results: decoded questions in, each question's complete branches
and features out, the bank and the feature cache read and written on the way.

What a question lacks depends on where its branches came from:
- decoded now with KV caches (lover_hf): banked at once; features read on the caches;
- decoded by an engine of tokens only (vLLM) or read from the bank: margins (tokens only) and, when asked, token
  statistics are missing, and the features are either in the feature cache or computed. Every question that needs
  its tokens run through the model goes into ONE shared pass with the others of the same call
  (`decode.features.questions_features`: rows of several questions side by side), which computes the missing margins
  and statistics too; a question decoded now is banked once that pass has completed its branches;
- features cached but statistics not: the statistics from a pass of their own (`stats_from_tokens`).

Every result's statistics are rounded to float16 as the bank stores them, so a question selects the same whether
decoded now or read back. Dimensions: N branches, T templates, L feature layers, D hidden size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from ..decode.branch import Branch
from ..decode.engine import Decoded
from ..decode.features import MAX_PASS_ROWS, assertion_features, questions_features, stats_from_tokens
from ..decode.token_stats import decode_stats, encode_stats
from .bank import BranchBank, FeatureCache

from ...log import log
#: Tokens per branch a pass over one question's N branches is planned for (a few-shot prompt and a 512-token branch):
#: its KV caches hold N x this many tokens at once (decode/features.questions_features keeps each branch's cache for
#: the template pass); a pass shared by several questions closes at that many tokens (pass_is_full), so it holds no
#: more, and lover_vllm's memory plan reserves that much for the HF copy (harness/vllm/memory_plan.py).
PASS_CONTEXT = 2048


@dataclass
class Pending:
    """One decoded question on its way through the step (features.Question is its plain (prompt, branches))."""

    prompt: list[int]
    key: str
    decoded: Decoded
    branches: list[Branch]
    margins: bool
    """Its branches lack margins (an engine that decodes tokens only)."""
    lacking: bool
    """It needs statistics computed (asked for, absent from the branches and the feature cache)."""
    found: list[dict] | None = None
    """Statistics (and margins) found in the feature cache or computed."""
    features: torch.Tensor | None = None
    """(N, T, L, D), once read or computed."""
    computed: bool = False
    """Its features were computed here (the feature cache lacks them)."""


@dataclass
class PassRecord:
    """What the shared passes over branches' tokens read and cost (the provenance's `pass`, a log line per run)."""

    questions: int = 0
    passes: int = 0
    tokens: int = 0
    """Prompt and branch tokens run through the model."""
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict:
        rate = self.tokens_per_second
        return {"questions": self.questions, "passes": self.passes, "tokens": self.tokens,
                "seconds": round(self.seconds, 3), "tokens_per_second": round(rate, 1)}


class StoreStep:
    """The step for one pipeline: its bank and feature cache (either may be None; the cache keyed by the model each
    call passes), its templates and layers."""

    def __init__(self, bank: BranchBank | None, feature_cache: FeatureCache | None, template_ids: list[list[int]],
                 layers: list[int]):
        self.bank, self.feature_cache, self.template_ids, self.layers = bank, feature_cache, template_ids, layers
        self.record = PassRecord()
        self.banked = 0
        """Questions this step has banked (decoded now)."""

    def complete(self, model, items: list[tuple[list[int], str, Decoded]], stats: bool
                 ) -> list[tuple[list[Branch], torch.Tensor]]:
        """Per (prompt, bank key, decoded question): its complete branches and (N, T, L, D) features."""
        cache = self.feature_cache.read_by(model) if self.feature_cache is not None else None
        questions = [self._read(model, cache, *item, stats) for item in items]
        needing = [q for q in questions if q.features is None]
        for flags in {(q.lacking, q.margins) for q in needing}:  # one shared pass per kind of need (usually one)
            group = [q for q in needing if (q.lacking, q.margins) == flags]
            began = time.perf_counter()
            computed = questions_features(model, [(q.prompt, q.branches) for q in group], self.template_ids,
                                          self.layers, stats=flags[0], margins=flags[1])
            self.record.seconds += time.perf_counter() - began
            self.record.passes += 1
            self.record.questions += len(group)
            self.record.tokens += sum(len(q.prompt) + sum(len(b.token_ids) for b in q.branches) for q in group)
            for q, out in zip(group, computed):  # (features, statistics) with statistics asked, else features
                if flags[0]:
                    q.features, q.found = out
                else:
                    q.features = out
                q.computed = True
        return [self._write(q, cache) for q in questions]

    def _bank(self, key: str, branches: list[Branch], prompt: list[int]) -> None:
        """Bank a question decoded now; the first one says, once, that from here on a stopped run resumes (a user
        who stops a long run learns that nothing decoded is lost, and a test can interrupt on the line)."""
        self.bank.add(key, branches, prompt_ids=prompt)
        self.banked += 1
        if self.banked == 1:
            log.info("lover: the first decoded question is banked in %s; a run stopped from here on resumes from the "
                     "bank (the same command reads banked questions back)", self.bank.path)

    def _read(self, model, cache: FeatureCache | None, prompt: list[int], key: str, decoded: Decoded, stats: bool
              ) -> Pending:
        """What the question has and lacks; features read on its caches or from the feature cache, when there."""
        branches = decoded.branches
        if decoded.fresh and self.bank is not None and decoded.caches is not None:  # complete as decoded: bank now
            self._bank(key, branches, prompt)
        margins = any(len(b.margins) != len(b.token_ids) for b in branches)
        lacking = margins or (stats and any(b.stats is None for b in branches))
        found = cache.get_stats(key) if lacking and cache is not None and not decoded.fresh else None
        q = Pending(prompt, key, decoded, branches, margins, lacking and found is None, found)
        if decoded.caches is not None:
            q.features = assertion_features(model, branches, decoded.caches, self.template_ids, self.layers)
            q.computed = True
        elif cache is not None:
            q.features = cache.get(key, self.layers, self.template_ids)
            if q.features is not None and q.lacking:  # features cached, statistics not: the whole model over the tokens
                q.found = stats_from_tokens(model, prompt, branches, margins=margins)
        return q

    def _write(self, q: Pending, cache: FeatureCache | None) -> tuple[list[Branch], torch.Tensor]:
        """The question's branches filled in, banked (decoded now, completed by the pass) and cached."""
        branches = q.branches
        if q.found is not None:
            branches = [_filled(b, s) for b, s in zip(branches, q.found)]
        if q.decoded.fresh and self.bank is not None and q.decoded.caches is None:
            self._bank(q.key, branches, q.prompt)
        if cache is not None and q.computed:
            cache.put(q.key, self.layers, self.template_ids, q.features)
        if cache is not None and q.lacking and not q.decoded.fresh:
            cache.put_stats(q.key, q.found)
        branches = [b if b.stats is None else replace(b, stats=decode_stats(encode_stats(b.stats))) for b in branches]
        return branches, q.features


def pass_is_full(waiting: list[tuple[list[int], Decoded]], n_branches: int, context: int = PASS_CONTEXT) -> bool:
    """Whether the questions waiting for a shared pass (prompt ids, decoded) should run now: at MAX_PASS_ROWS
    branches, or once their rows (each padded to its question's prompt and longest branch) reach the tokens the
    memory plan reserves for one question's N branches of `context` tokens, so a shared pass never holds more."""
    rows = sum(len(d.branches) for _, d in waiting)
    tokens = sum(len(d.branches) * (len(p) + max((len(b.token_ids) for b in d.branches), default=0))
                 for p, d in waiting)
    return rows >= MAX_PASS_ROWS or tokens >= n_branches * context


def _filled(branch: Branch, found: dict[str, list[float]]) -> Branch:
    """`branch` with what a teacher-forced pass found (statistics, and "margin" when asked) where it had none."""
    found = dict(found)
    margins = found.pop("margin", None)
    return replace(branch, stats=branch.stats if branch.stats is not None else found,
                   margins=margins if margins is not None and len(branch.margins) != len(branch.token_ids)
                   else branch.margins)
