"""N-branch decoding: CoT-decoding (top-N first tokens, then greedy), sampling, or beam search (beam.py).

Each question's prompt is prefilled once; its KV cache is then repeated for the N branches, which
continue in one batch. A branch stops on its own (stop string, EOS or the token budget) and leaves the
batch at once; its slice of the KV cache is kept so that the assertion features (features.py) can be
computed on top of it without re-encoding question and solution. With a row budget (`max_rows`), the
next questions join the running batch as soon as their N rows are free (continuous batching, kv.RowBatch).
Each token comes with its margin and its token_stats (computed on the device from the step's logits, brought to the
host with the token in one transfer).

Dimensions: Q questions, N branches per question, A rows decoding, P padded prompt length, V vocabulary.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .beam import iter_beam
from .branch import Branch, finish_reason_of, make_branch, top1_top2_margin
from .kv import BranchCache, RowBatch, cache_of, input_device, with_cache
from .token_stats import stats_dict, step_stats

MODES = ("cot", "sample", "beam")


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
    a branch (benchmarks/RESULTS.md: 76 of 100 bf16 branches identical)."""

    continuous: bool = True
    """Refill a finished question's rows with the next question's branches (continuous batching). Off: batches of
    `max_rows` // N questions (`batch_size` by default), each living until its longest branch ends."""
    max_rows: int | None = None
    """Rows decoded together; default lm-eval's `batch_size` x n_branches. At least n_branches; questions join
    whole, so a budget that is not a multiple of n_branches leaves its remainder unused."""

    def __post_init__(self):
        if self.max_rows is not None:
            self.max_rows = int(self.max_rows)
            if self.max_rows < 1:
                raise ValueError(f"max_rows={self.max_rows} must be >= 1 (e.g. max_rows=50), or omitted.")

    def rows(self, batch_size: int, n_branches: int) -> int:
        """The row budget for lm-eval's `batch_size` questions of N branches."""
        rows = self.max_rows if self.max_rows is not None else batch_size * n_branches
        if rows < n_branches:
            raise ValueError(f"max_rows={rows} is fewer than n_branches={n_branches}: a question's branches "
                             f"decode together; use max_rows >= {n_branches}.")
        return rows


def question_seed(seed: int, prompt: list[int]) -> int:
    """The sampling seed of one question: from the run's seed and the prompt, so that questions draw independent
    streams (one shared seed would give every question the same uniforms) and a question's draws do not depend on
    which questions share its batch. sha256, not `hash()`: the same on every machine and Python run."""
    digest = hashlib.sha256(json.dumps([seed, prompt]).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1  # 63 bits: what manual_seed takes


def _nucleus(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, V) probabilities -> (B, V) nucleus weights in descending order, and that order."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # always keeps the top token
    return sorted_probs.masked_fill(outside, 0.0), order


def _nucleus_sample(probs: torch.Tensor, top_p: float, n: int, generator) -> torch.Tensor:
    """(B, V) probabilities -> (B, n) tokens sampled from the top-p nucleus."""
    weights, order = _nucleus(probs, top_p)
    return order.gather(-1, torch.multinomial(weights, n, replacement=True, generator=generator))


def decode_branches(model, tokenizer, prompts: list[list[int]], config: DecodingConfig, max_new_tokens: int,
                    stop: list[str], eos_ids: set[int], pad_id: int, max_rows: int | None = None,
                    ) -> tuple[list[list[Branch]], list[list[BranchCache]]]:
    """`iter_branches` collected: every prompt's branches and caches, in prompt order (tests and benchmarks; the
    pipeline consumes the iterator, so that caches are freed question by question)."""
    branches: list = [None] * len(prompts)
    caches: list = [None] * len(prompts)
    for q, q_branches, q_caches in iter_branches(model, tokenizer, prompts, config, max_new_tokens, stop, eos_ids,
                                                 pad_id, max_rows):
        branches[q], caches[q] = q_branches, q_caches
    return branches, caches


@dataclass
class _Row:
    """A branch being decoded: branch k of question q, its tokens so far, their margins and token_stats."""

    q: int
    k: int
    ids: list[int]
    margins: list[float]
    stats: list[list[float]]
    """Per token, the 4 values of token_stats.step_stats (STAT_NAMES order)."""


def _to_host(tokens: torch.Tensor, probs: torch.Tensor, logits: torch.Tensor) -> list[tuple[int, float, list[float]]]:
    """(...) chosen tokens and their (..., V) distributions -> per token, in row-major order, (token, margin, the 4
    token_stats), in ONE device-to-host transfer: every `.tolist()` waits for the device, and a step already waited
    once for its tokens before the statistics existed. The ids travel as float32 beside the floats: exact below 2^24
    (vocabularies are ~10^5)."""
    if logits.shape[-1] > 1 << 24:
        raise ValueError(f"a vocabulary of {logits.shape[-1]} tokens is too large for decoding.py's packed transfer "
                         "(token ids as float32 are exact only below 2^24); split the transfer in _to_host.")
    packed = torch.cat([tokens[..., None].float(), top1_top2_margin(probs)[..., None],
                        step_stats(logits, tokens, probs=probs)], dim=-1).reshape(-1, 6)  # (A, 6)
    return [(int(row[0]), row[1], row[2:]) for row in packed.tolist()]


def _prefill(model, prompts: list[list[int]], admitted: list[int], config: DecodingConfig, pad_id: int,
             generators: dict) -> tuple[RowBatch, list[_Row]]:
    """Encode the admitted prompts in one left-padded batch and start their N branches each: rows q*N + k."""
    device, n = input_device(model), config.n_branches
    width = max(len(prompts[q]) for q in admitted)
    input_ids = torch.full((len(admitted), width), pad_id, dtype=torch.long, device=device)  # (Q, P) left-padded
    mask = torch.zeros((len(admitted), width), dtype=torch.long, device=device)
    for i, q in enumerate(admitted):
        input_ids[i, width - len(prompts[q]):] = torch.tensor(prompts[q], device=device)
        mask[i, width - len(prompts[q]):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    # Only the last position's logits are needed: the LM head over every prompt token would cost P times more.
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    logits = out.logits[:, -1].float()  # (Q, V)
    probs = logits.softmax(-1)
    if config.mode == "cot":
        if n > probs.shape[-1]:
            raise ValueError(f"n_branches={n} exceeds the vocabulary size {probs.shape[-1]}.")
        first = probs.topk(n, dim=-1).indices  # (Q, N)
    else:
        tempered = (probs.log() / config.temperature).softmax(-1)
        # Each question its own generator (question_seed): its branches do not depend on its batch-mates.
        for q in admitted:
            generators[q] = torch.Generator(device=device).manual_seed(question_seed(config.seed, prompts[q]))
        first = torch.cat([_nucleus_sample(tempered[i: i + 1], config.top_p, n, generators[q])
                           for i, q in enumerate(admitted)])  # (Q, N)
    # Row q*N + k's first token came from question q's distribution: (Q, N, V) views of the (Q, V) ones.
    firsts = _to_host(first, probs[:, None].expand(-1, n, -1), logits[:, None].expand(-1, n, -1))
    cache = cache_of(out)
    cache.batch_repeat_interleave(n)
    rows = [_Row(q, k, [token], [margin], [stats])
            for (token, margin, stats), (q, k) in zip(firsts, [(q, k) for q in admitted for k in range(n)])]
    return RowBatch(cache, mask.repeat_interleave(n, dim=0)), rows  # (Q*N, P)


def _next_tokens(probs: torch.Tensor, rows: list[_Row], config: DecodingConfig, generators: dict) -> torch.Tensor:
    """(A, V) next-token probabilities -> (A,) the token each row continues with, on the device (`_to_host` brings
    it over with the step's margins and statistics)."""
    if config.mode == "cot":
        return probs.argmax(-1)
    # One sort for every row; only the draws are per question, each from its own generator.
    weights, order = _nucleus((probs.log() / config.temperature).softmax(-1), config.top_p)
    tokens, start = [], 0
    while start < len(rows):  # a question's rows are contiguous, in branch order
        end = next((i for i in range(start, len(rows)) if rows[i].q != rows[start].q), len(rows))
        picks = torch.multinomial(weights[start:end], 1, replacement=True,
                                  generator=generators[rows[start].q])  # (rows of q, 1)
        tokens.append(order[start:end].gather(-1, picks)[:, 0])
        start = end
    return torch.cat(tokens)


@torch.inference_mode()
def iter_branches(model, tokenizer, prompts: list[list[int]], config: DecodingConfig, max_new_tokens: int,
                  stop: list[str], eos_ids: set[int], pad_id: int, max_rows: int | None = None,
                  ) -> Iterator[tuple[int, list[Branch], list[BranchCache]]]:
    """Decode N branches for each of Q prompts (lists of token ids); yield `(q, branches, caches)` for prompt q as
    soon as its N branches are done (the bank writes it then, so a kill loses only the questions still decoding).

    At most `max_rows` rows (default: all prompts at once) decode together. When a question's last branch ends, the
    next prompts whose N rows fit are prefilled and join the running batch (continuous batching): rows never idle
    until the slowest branch of a batch ends. Questions are admitted in order, all N branches at once."""
    if config.mode == "beam":
        yield from iter_beam(model, tokenizer, prompts, config, max_new_tokens, stop, eos_ids, pad_id)
        return
    if not prompts:
        return
    device, n = input_device(model), config.n_branches
    max_rows = BatchingConfig(max_rows=max_rows).rows(len(prompts), n)  # a budget below one question's N rows is refused
    queue, generators = deque(range(len(prompts))), {}
    rows: list[_Row] = []
    batch: RowBatch | None = None
    done: dict[int, dict[int, tuple[Branch, BranchCache]]] = defaultdict(dict)  # q -> k -> finished branch

    def has_room() -> bool:
        return bool(queue) and len(rows) + n <= max_rows and (not rows or batch.can_extend())

    while queue or rows:
        admitted = []
        while has_room() and len(rows) + (len(admitted) + 1) * n <= max_rows:
            admitted.append(queue.popleft())
        if admitted:
            joining, new_rows = _prefill(model, prompts, admitted, config, pad_id, generators)
            if rows:
                batch.extend(joining)  # copies: `joining`'s own cache must not outlive this
                del joining
            else:
                batch = joining
            rows += new_rows
        keep = []
        for i, row in enumerate(rows):
            reason = finish_reason_of(tokenizer, row.ids, stop, eos_ids, max_new_tokens)
            if reason is None:
                keep.append(i)
                continue
            branch = make_branch(tokenizer, row.ids, row.margins, stop, reason, stats_dict(row.stats))
            done[row.q][row.k] = branch, batch.snapshot(i, len(prompts[row.q]))
            if len(done[row.q]) == n:
                finished = done.pop(row.q)
                generators.pop(row.q, None)
                yield row.q, [finished[k][0] for k in range(n)], [finished[k][1] for k in range(n)]
                del finished  # its caches are the consumer's now: held here, they would outlive its features
        if len(keep) < len(rows):
            batch.select(keep)
            rows = [rows[i] for i in keep]
        if not rows or has_room():
            continue  # admit the next questions before the step, so no row idles through it
        tokens = torch.tensor([[row.ids[-1]] for row in rows], device=device)  # (A, 1)
        positions = torch.tensor([[len(prompts[row.q]) + len(row.ids) - 1] for row in rows], device=device)
        out = model(input_ids=tokens, attention_mask=batch.grow(), position_ids=positions, use_cache=True,
                    **with_cache(model, batch.cache))
        logits = out.logits[:, -1].float()  # (A, V); a no-op for a float32 model
        probs = logits.softmax(-1)
        for row, (token, margin, stats) in zip(rows, _to_host(_next_tokens(probs, rows, config, generators), probs,
                                                              logits)):
            row.ids.append(token)
            row.margins.append(margin)
            row.stats.append(stats)
