"""The authors' reductions of the paper's constraints (`VerifierConfig.reduction="representative"`).

The authors' public code (`method.py`) computes the same three constraints as the paper's equations (losses.py)
but reduces them differently; written here from reading it, for `regime=authors`:

* negation on **one random representative** a_k per answer group, averaged over every group of every question
  pooled: ``L_nega = mean_(q,k) [ min(p+_a, p-_a)^2 + (p+_a + p-_a - 1)^2 ]``;
* intra-group on **one random pair** (i, j) per group of two or more branches, averaged over those groups pooled:
  ``L_intra = mean_(q,k) [ (p+_i - p+_j)^2 + (p-_i - p-_j)^2 ]`` (0 when no group has two branches);
* inter-group with the raw-probability entropy of :func:`losses_variants.inter_raw_per_question` (their code's
  term), averaged **within buckets of questions with the same number of groups**, then over the buckets; the
  paper's normalised entropy (``inter``) is bucketed the same way when a spec names it with this reduction.

Each is registered under the same name as the paper's term, for reduction "representative".

Dimensions: Q questions, N branches, G = N group slots.
"""

from __future__ import annotations

import torch

from .losses import DRAWS, _check, group_count, inter_per_question, register_loss
from .losses_variants import inter_raw_per_question


def bucket_weights(n_groups: torch.Tensor) -> torch.Tensor:
    """(Q,) each question's weight in :func:`bucket_mean`: ``1 / (buckets * questions in its bucket)``, 0 for a
    question without groups (a bucket is the questions with one group count)."""
    values, inverse, counts = torch.unique(n_groups, return_inverse=True, return_counts=True)
    n_buckets = max(int((values > 0).sum()), 1)
    return torch.where(n_groups > 0, 1.0 / (counts[inverse] * n_buckets), 0.0).to(torch.get_default_dtype())


def question_buckets(groups: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(n_groups, weights)``, each (Q,): :func:`losses.group_count` and :func:`bucket_weights`. They depend on the
    batch's groups only, so a full-batch fit makes them once (the ``buckets`` draw, losses.DRAWS)."""
    n_groups = group_count(groups, mask)  # (Q,)
    return n_groups, bucket_weights(n_groups)


DRAWS["buckets"] = lambda groups, mask, generator=None: question_buckets(groups, mask)


def bucket_mean(per_question: torch.Tensor, n_groups: torch.Tensor,
                weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean within buckets of questions with equal group count (0-group questions left out), then over buckets:
    ``sum_q weights_q * per_question_q`` with :func:`bucket_weights` (computed here unless given)."""
    weights = bucket_weights(n_groups) if weights is None else weights
    # where, not a product alone: a question without groups must not bring a NaN into the sum
    return torch.where(weights > 0, per_question, 0.0).mul(weights.to(per_question.dtype)).sum()


@register_loss("nega", ("p_pos", "p_neg", "mask", "groups"), draws=("reps",), reduction="representative")
def negation_loss_representative(p_pos: torch.Tensor, p_neg: torch.Tensor, mask: torch.Tensor,
                                 groups: torch.Tensor, *, reps: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``mean over (q, k) of min(p+_a, p-_a)^2 + (p+_a + p-_a - 1)^2`` with a = the representative of group k."""
    _check(p_pos, mask, groups)
    index, exists = reps  # (Q, G) each
    pos, neg = torch.gather(p_pos, 1, index)[exists], torch.gather(p_neg, 1, index)[exists]  # (R,) representatives
    if pos.numel() == 0:
        return p_pos.new_zeros(())
    return (torch.minimum(pos, neg) ** 2 + (pos + neg - 1) ** 2).mean()


@register_loss("intra", ("p_pos", "p_neg", "mask", "groups"), draws=("pairs",), reduction="representative")
def intra_group_loss_representative(p_pos: torch.Tensor, p_neg: torch.Tensor, mask: torch.Tensor,
                                    groups: torch.Tensor, *,
                                    pairs: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``mean over groups with a pair (i, j) of (p+_i - p+_j)^2 + (p-_i - p-_j)^2``; 0 without such a group."""
    _check(p_pos, mask, groups)
    first, second, has_pair = pairs  # (Q, G) each
    if not has_pair.any():
        return p_pos.new_zeros(())
    gap = [(torch.gather(p, 1, first) - torch.gather(p, 1, second))[has_pair] ** 2 for p in (p_pos, p_neg)]  # (P,)
    return (gap[0] + gap[1]).mean()


@register_loss("inter_raw", ("p_pos", "mask", "groups"), draws=("reps", "buckets"), reduction="representative")
def inter_raw_loss_bucketed(p_pos: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor, *,
                            reps: tuple[torch.Tensor, torch.Tensor],
                            buckets: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """:func:`losses_variants.inter_raw_loss`'s per-question value, averaged by :func:`bucket_mean`; ``buckets``:
    :func:`question_buckets` of these groups (made here unless given)."""
    n_groups, weights = buckets if buckets is not None else question_buckets(groups, mask)
    return bucket_mean(inter_raw_per_question(p_pos, mask, groups, reps=reps, n_groups=n_groups), n_groups, weights)


@register_loss("inter", ("p_pos", "mask", "groups"), draws=("reps", "buckets"), reduction="representative")
def inter_loss_bucketed(p_pos: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor, *,
                        reps: tuple[torch.Tensor, torch.Tensor],
                        buckets: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """:func:`losses.inter_group_loss`'s per-question value, averaged by :func:`bucket_mean` (``buckets`` as above)."""
    n_groups, weights = buckets if buckets is not None else question_buckets(groups, mask)
    return bucket_mean(inter_per_question(p_pos, mask, groups, reps=reps), n_groups, weights)
