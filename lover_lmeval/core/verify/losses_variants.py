"""Variants of the inter-group term and a cross-question prior, beside the paper's terms in losses.py.

Not the paper's equations: ``inter_raw`` is the authors' code's inter-group term, ``inter_logic`` the paper
appendix's product t-norm, ``balance`` an experimental prior of ours. Same conventions as losses.py (pure functions,
``(Q, N)`` probabilities, a mean over questions with real branches), with one more dimension:

* ``A`` -- distinct answer strings across the batch (only :func:`balance_loss` looks across questions).

Registered in the loss-term registry by importing the core package (its ``__init__``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .losses import (EPS, _check, _mean_over_questions, _representative_probs, group_count, register_loss,
                     sample_representatives)

#: An answer string takes part in :func:`balance_loss` once it is a candidate in this many questions of a batch:
#: two-answer tasks and iGSM's 23 residues pass in any 64-question batch, GSM8K's numbers almost never do.
BALANCE_MIN_QUESTIONS = 5


@register_loss("inter_raw", ("p_pos", "mask", "groups"), draws=("reps",))
def inter_raw_loss(p_pos: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor,
                   generator: torch.Generator | None = None, *,
                   reps: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Inter-group term with the entropy of the *raw* representative probabilities (authors' code).

    ``L = (sum_k p_k - 1)^2 + (1/G_q) sum_k -p_k log2 p_k`` over the ``G_q`` non-empty groups.

    Why it exists: the normalised entropy of :func:`inter_group_loss` is scale-free, so "every group
    false" (all ``p_k -> 0`` with one relatively larger) costs only the sum term, 1, while a hedge over
    G groups costs ``log G`` (1.6 at G = 5); a fit can settle in that corner. Here the all-false corner
    still costs 1, a hedge ``p_k = 1/G`` costs ``log2(G) / G`` (0.46 at G = 5) and one true group 0.
    """
    return _mean_over_questions(inter_raw_per_question(p_pos, mask, groups, generator, reps=reps), mask)


def inter_raw_per_question(p_pos: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor,
                           generator: torch.Generator | None = None, *,
                           reps: tuple[torch.Tensor, torch.Tensor] | None = None,
                           n_groups: torch.Tensor | None = None) -> torch.Tensor:
    """(Q,) the value of :func:`inter_raw_loss` for each question, before any mean over questions. ``n_groups``
    (Q,): :func:`losses.group_count` of these groups, when the caller holds it."""
    _check(p_pos, mask, groups)
    rep = _representative_probs(p_pos, mask, groups, generator, reps)  # (Q, G), 0 in empty slots
    n_groups = (group_count(groups, mask) if n_groups is None else n_groups).clamp(min=1)  # (Q,)
    self_info = -(rep * torch.log2(rep.clamp(min=EPS))).sum(dim=1)  # (Q,); empty slots add 0 * log(EPS) = 0
    return (rep.sum(dim=1) - 1) ** 2 + self_info / n_groups


@register_loss("inter_logic", ("p_pos", "mask", "groups"), draws=("reps",))
def inter_logic_loss(p_pos: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor,
                     generator: torch.Generator | None = None, *,
                     reps: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Logic variant of the inter-group term (paper appendix).

    Relax "exactly one group is true" with the product t-norm over the group
    representatives ``p_k = p+_{a_k}``:
    ``P(exactly one) = sum_k p_k prod_{m != k} (1 - p_m)`` and ``L = -log(P + EPS)``.
    The leave-one-out product is formed from exclusive prefix/suffix cumulative
    products instead of dividing by ``1 - p_k`` (which blows up as ``p_k -> 1``).
    """
    _check(p_pos, mask, groups)
    rep = _representative_probs(p_pos, mask, groups, generator, reps)  # (Q, G)
    one_minus = 1 - rep  # (Q, G)
    ones = torch.ones_like(one_minus[:, :1])  # (Q, 1)
    prefix = torch.cumprod(torch.cat([ones, one_minus[:, :-1]], dim=1), dim=1)  # (Q, G): prod_{m<k}
    suffix = torch.cumprod(torch.cat([ones, one_minus.flip(1)[:, :-1]], dim=1), dim=1).flip(1)  # (Q, G): prod_{m>k}
    p_exactly_one = (rep * prefix * suffix).sum(dim=1)  # (Q,)
    return _mean_over_questions(-torch.log(p_exactly_one + EPS), mask)


@register_loss("balance", ("p_pos", "mask", "groups", "answer_ids"), draws=("reps",))
def balance_loss(p_pos: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor, answer_ids: torch.Tensor,
                 generator: torch.Generator | None = None, *,
                 reps: tuple[torch.Tensor, torch.Tensor] | None = None,
                 min_questions: int = BALANCE_MIN_QUESTIONS) -> torch.Tensor:
    """No answer string should win everywhere it appears (a label-free prior across questions; experimental).

    Why it exists: on a two-answer task "always pick answer a" satisfies negation, intra- and inter-group
    terms at once, because the features separate the answers' texts (every binary test-time fit on the full BBH sets
    did: benchmarks/runs/run10_bbh_navigate_full.md). With
    ``p_hat`` the normalised group distribution of :func:`inter_group_loss`, for every answer string ``a``
    that is a candidate in ``n_a >= min_questions`` questions of the batch:
    ``c_a = (1/n_a) sum_{q contains a} p_hat_{q,a}`` (how often ``a`` is chosen where it could be) and
    ``u_a = (1/n_a) sum_{q contains a} 1/G_q`` (the same for a verifier without preference), and
    ``L_balance = mean_a (c_a - u_a)^2``.  Branches without an answer (``answer_ids = -1``) do not count.
    A constant answer on a two-answer task costs 0.25; answers split in proportion to chance cost 0.
    Measured at weight 10 (benchmarks/runs/run11_bbh_multistep_full.md): it breaks the constant answer on four of
    five two-answer sets, but the split it finds is no better than the constant, so it is not a default.
    """
    _check(p_pos, mask, groups)
    assert answer_ids.shape == p_pos.shape, f"answer_ids must be {tuple(p_pos.shape)}, got {tuple(answer_ids.shape)}"
    reps = reps if reps is not None else sample_representatives(groups, mask, generator)
    index, exists = reps
    rep = _representative_probs(p_pos, mask, groups, generator, reps)  # (Q, G)
    p_hat = rep / (rep.sum(dim=1, keepdim=True) + EPS)  # (Q, G)
    group_answer = torch.gather(torch.where(mask, answer_ids, -1), 1, index)  # (Q, G): the group's answer string
    counted = exists & (group_answer >= 0)  # (Q, G)
    if not counted.any():
        return p_pos.new_zeros(())
    # ids are global (a whole split); renumber the ones in this batch 0..A-1 to keep the one-hot small
    _, renumbered = torch.unique(group_answer[counted], return_inverse=True)
    batch_ids = torch.zeros_like(group_answer)  # (Q, G)
    batch_ids[counted] = renumbered
    onehot = F.one_hot(batch_ids, int(renumbered.max()) + 1).to(p_pos.dtype)  # (Q, G, A)
    onehot = onehot * counted.unsqueeze(-1)  # unanswered groups and empty slots belong to no answer
    n_groups = exists.sum(dim=1).clamp(min=1).to(p_pos.dtype)  # (Q,)
    present = onehot.amax(dim=1)  # (Q, A): a question holds each answer string in at most one group
    n_a = present.sum(dim=0)  # (A,)
    chosen = torch.einsum("qg,qga->a", p_hat, onehot)  # (A,)
    chance = torch.einsum("qa,q->a", present, 1 / n_groups)  # (A,)
    kept = n_a >= min_questions
    if not kept.any():
        return p_pos.new_zeros(())
    return (((chosen - chance) / n_a.clamp(min=1)) ** 2)[kept].mean()
