"""What both row stores (growing.py's growing batch, static.py's fixed rows) share: a branch being decoded (`Row`), the
prefill that starts a question's N rows, and the packed per-step values that reach the host one block of steps at a
time.

Dimensions: Q questions, N branches per question, A rows, K steps in a block, P padded prompt length, V vocabulary.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch

from .branch import finish_reason_of, make_branch, top1_top2_margin
from .kv import RowBatch, cache_of, input_device
from .sampling import nucleus_sample, question_seed
from .token_stats import stats_dict, step_stats


@dataclass
class Row:
    """A branch being decoded: branch k of question q, its tokens so far, their margins and token_stats, and the
    tokens decoded since the last host check (`pending`)."""

    q: int
    k: int
    prompt_length: int
    """Tokens of question q's prompt (its cache's first columns)."""
    ids: list[int] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)
    stats: list[list[float]] = field(default_factory=list)
    """Per token, the 4 values of token_stats.step_stats (STAT_NAMES order)."""
    pending: list[tuple[int, float, list[float]]] = field(default_factory=list)
    """(token, margin, stats) of the steps since the last transfer, not yet checked for an end."""

    def take_pending(self, tokenizer, stop: list[str], eos_ids: set[int], budget: int) -> str | None:
        """Append the pending tokens one at a time and check each as the step-by-step decoder did: the first that
        ends the branch ends it, and those decoded after it (inside the same block) are dropped. Why it ended, or
        None."""
        pending, self.pending = self.pending, []
        for token, margin, stats in pending:
            self.ids.append(token)
            self.margins.append(margin)
            self.stats.append(stats)
            reason = finish_reason_of(tokenizer, self.ids, stop, eos_ids, budget)
            if reason is not None:
                return reason
        return None


class Finished:
    """Finished branches held per question until its N are in (both loops hand a question over whole)."""

    def __init__(self, n: int):
        self.n, self.by_question = n, defaultdict(dict)  # q -> k -> (Branch, BranchCache)

    def add(self, row: Row, tokenizer, stop: list[str], reason: str, snapshot) -> tuple | None:
        """Branch `row` ended for `reason`; `snapshot(length)` copies its KV cache's first `length` columns. Its cache
        is taken as at its end: the prompt and every token but the last (never fed), not the ones decoded on to the
        end of a block. `(q, branches, caches)` once question q's N branches are in, else None."""
        branch = make_branch(tokenizer, row.ids, row.margins, stop, reason, stats_dict(row.stats))
        self.by_question[row.q][row.k] = branch, snapshot(row.prompt_length + len(row.ids) - 1)
        if len(self.by_question[row.q]) < self.n:
            return None
        finished = self.by_question.pop(row.q)
        return row.q, [finished[k][0] for k in range(self.n)], [finished[k][1] for k in range(self.n)]


def pack(tokens: torch.Tensor, probs: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """(...) chosen tokens and their (..., V) distributions -> (..., 6): per token its id, margin and 4 token_stats,
    on the device, so that a block of steps reaches the host in ONE transfer (`to_host`): every `.tolist()` waits
    for the device. The ids travel as float32 beside the floats: exact below 2^24 (vocabularies are ~10^5)."""
    if logits.shape[-1] > 1 << 24:
        raise ValueError(f"a vocabulary of {logits.shape[-1]} tokens is too large for decoding.py's packed transfer "
                         "(token ids as float32 are exact only below 2^24); split the transfer in rows.pack.")
    return torch.cat([tokens[..., None].float(), top1_top2_margin(probs)[..., None],
                      step_stats(logits, tokens, probs=probs)], dim=-1)


def to_host(packed: torch.Tensor) -> list[list[tuple[int, float, list[float]]]]:
    """(A, K, 6) packed steps -> per row, per step, (token, margin, the 4 token_stats); one device-to-host copy."""
    return [[(int(step[0]), step[1], step[2:]) for step in row] for row in packed.tolist()]


def prefill(model, prompts: list[list[int]], admitted: list[int], config, pad_id: int,
             generators: dict) -> tuple[RowBatch, list[Row], torch.Tensor]:
    """Encode the admitted prompts in one left-padded batch and start their N branches each: rows q*N + k, their
    first tokens pending (not yet checked for an end) and on the device, (Q*N,), to be fed by the next step."""
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
        first = torch.cat([nucleus_sample(tempered[i: i + 1], config.top_p, n, generators[q])
                           for i, q in enumerate(admitted)])  # (Q, N)
    # Row q*N + k's first token came from question q's distribution: (Q, N, V) views of the (Q, V) ones.
    packed = pack(first, probs[:, None].expand(-1, n, -1), logits[:, None].expand(-1, n, -1))  # (Q, N, 6)
    firsts = to_host(packed.reshape(-1, 1, 6))  # (Q*N, 1, 6): one step per row
    cache = cache_of(out)
    cache.batch_repeat_interleave(n)
    rows = [Row(q, k, len(prompts[q]), pending=steps)
            for steps, (q, k) in zip(firsts, [(q, k) for q in admitted for k in range(n)])]
    return RowBatch(cache, mask.repeat_interleave(n, dim=0)), rows, first.reshape(-1)  # (Q*N, P), (Q*N,)
