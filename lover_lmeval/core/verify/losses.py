"""LoVer training objectives over batched, padded solution branches.

Dimension names used throughout this module:

* ``Q`` -- questions in the batch,
* ``N`` -- solution branches per question (padded; ``mask`` marks real ones),
* ``G`` -- answer groups per question.  Group ids live in ``[0, N)`` so we
  always allocate ``G = N`` group slots; unused slots are simply empty.

Every loss takes probabilities ``p_pos = p(x+)`` and ``p_neg = p(x-)`` of shape
``(Q, N)``, sums its per-branch / per-group terms within each question and
then averages over the questions that have at least one real branch.  All
functions are vectorised over questions (one-hot ``(Q, N, G)`` membership
matrices instead of Python loops) so they run as a handful of tensor ops. A loss spec ("nega+intra+inter") names
registered terms; loss_spec.py parses it and sums them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
import torch.nn.functional as F

EPS = 1e-8


@dataclass(frozen=True)
class LossTerm:
    """A registered loss term: the pure function and which batch tensors it takes, in order."""

    function: Callable[..., torch.Tensor]
    inputs: tuple[str, ...]
    """Names among p_pos, p_neg, mask, groups, answer_ids, labels, passed positionally."""
    draws: tuple[str, ...]
    """Inputs drawn or derived per batch that it takes as keywords (``DRAWS``): ``reps``
    (:func:`sample_representatives`, shared by every term of a step), ``pairs`` (:func:`sample_pairs`), ``buckets``
    (losses_authors.question_buckets); a fit may hold them across steps."""


#: How a term reduces over branches and questions: "all" = the paper's equations (sums over every branch and
#: pair, then the mean over questions); "representative" = the authors' code (losses_authors.py; it and the
#: variants of losses_variants.py register by importing the core package). inter_logic, balance and supervised
#: have no representative variant and keep theirs.
REDUCTIONS = ("all", "representative")
#: reduction -> term name -> term, in registration order; a loss spec ("nega+intra+inter") names these.
LOSS_TERMS: dict[str, dict[str, LossTerm]] = {reduction: {} for reduction in REDUCTIONS}


def register_loss(name: str, inputs: tuple[str, ...], draws: tuple[str, ...] = (), reduction: str = "all"):
    """Decorator: make a pure loss function available in loss specs as ``name`` under ``reduction`` (a term with
    no "representative" variant uses its "all" one there)."""

    def add(function):
        if name in LOSS_TERMS[reduction]:
            raise ValueError(f"loss term {name!r} is registered twice for reduction {reduction!r}")
        LOSS_TERMS[reduction][name] = LossTerm(function, inputs, draws)
        return function

    return add


#: True inside :func:`groups_checked`: the group ids were range-checked once for a whole fit, so the terms skip the
#: per-call check (two host reads each, three terms a step, 15000 steps in a regime=authors fit).
_GROUPS_CHECKED: ContextVar[bool] = ContextVar("groups_checked", default=False)


@contextmanager
def groups_checked():
    """Within it, the loss terms trust that real branches' group ids lie in [0, N) (the caller checked them)."""
    token = _GROUPS_CHECKED.set(True)
    try:
        yield
    finally:
        _GROUPS_CHECKED.reset(token)


def _check(p_pos: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor | None = None) -> None:
    assert p_pos.ndim == 2, f"probabilities must be (Q, N), got {tuple(p_pos.shape)}"
    assert mask.shape == p_pos.shape, f"mask must be {tuple(p_pos.shape)}, got {tuple(mask.shape)}"
    if groups is not None and not _GROUPS_CHECKED.get():
        assert groups.shape == p_pos.shape, f"groups must be {tuple(p_pos.shape)}, got {tuple(groups.shape)}"
        real = groups[mask]
        n = p_pos.shape[1]
        assert real.numel() == 0 or (int(real.min()) >= 0 and int(real.max()) < n), (
            f"group ids of real branches must lie in [0, N={n})")


def _zero_padding(p: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Zero padded entries: they may hold NaN/garbage, and NaN * 0 would still poison sums."""
    return torch.where(mask, p, torch.zeros_like(p))


def _mean_over_questions(per_question: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Average a ``(Q,)`` loss over questions that have at least one real branch."""
    valid = mask.any(dim=1)  # (Q,)
    return (per_question * valid).sum() / valid.sum().clamp(min=1)


def group_onehot(groups: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Float membership matrix ``M[q, i, k] = 1`` iff real branch ``i`` is in group ``k``.

    Shape ``(Q, N, G)`` with ``G = N``; padded branches have all-zero rows so they
    never contribute to group statistics.
    """
    n = groups.shape[1]
    # padded branches may carry arbitrary ids; clamp so one_hot accepts them, then zero them out
    safe = torch.where(mask, groups, torch.zeros_like(groups)).long()  # (Q, N)
    return F.one_hot(safe, num_classes=n).to(torch.get_default_dtype()) * mask.unsqueeze(-1)  # (Q, N, G)


@register_loss("nega", ("p_pos", "p_neg", "mask"))
def negation_loss(p_pos: torch.Tensor, p_neg: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negation consistency + confidence (CCS-style), summed over branches.

    ``L_sum  = sum_i (p+_i + p-_i - 1)^2``  (x+ and x- must be complementary)
    ``L_diff = sum_i min(p+_i, p-_i)^2``    (rules out the p+ = p- = 0.5 solution)
    ``nega   = L_sum + L_diff``, then mean over questions.
    """
    _check(p_pos, mask)
    per_branch = (p_pos + p_neg - 1) ** 2 + torch.minimum(p_pos, p_neg) ** 2  # (Q, N)
    return _mean_over_questions(_zero_padding(per_branch, mask).sum(dim=1), mask)


@register_loss("intra", ("p_pos", "p_neg", "mask", "groups"))
def intra_group_loss(p_pos: torch.Tensor, p_neg: torch.Tensor, mask: torch.Tensor,
                     groups: torch.Tensor) -> torch.Tensor:
    """Branches sharing a final answer must agree, summed over ordered pairs.

    ``L_intra = sum_k sum_{i,j in A_k} (p+_i - p+_j)^2 + (p-_i - p-_j)^2``

    computed without pairs via ``sum_{i,j in A}(p_i - p_j)^2 = 2|A| sum_{i in A}(p_i - mean_A)^2``.
    """
    _check(p_pos, mask, groups)
    p_pos, p_neg = _zero_padding(p_pos, mask), _zero_padding(p_neg, mask)
    onehot = group_onehot(groups, mask).to(p_pos.dtype)  # (Q, N, G)
    counts = onehot.sum(dim=1)  # (Q, G)
    total = p_pos.new_zeros(p_pos.shape[0])  # (Q,)
    for p in (p_pos, p_neg):
        means = torch.einsum("qng,qn->qg", onehot, p) / counts.clamp(min=1)  # (Q, G)
        branch_mean = torch.einsum("qng,qg->qn", onehot, means)  # (Q, N), 0 on padding
        sq_dev = torch.einsum("qng,qn->qg", onehot, (p - branch_mean) ** 2)  # (Q, G)
        total = total + (2 * counts * sq_dev).sum(dim=1)
    return _mean_over_questions(total, mask)


def sample_representatives(groups: torch.Tensor, mask: torch.Tensor,
                           generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one uniformly random real branch per non-empty group.

    Returns ``(index, exists)``, both ``(Q, G)``: ``index[q, k]`` is the branch
    chosen for group ``k`` (meaningless where ``exists[q, k]`` is False).
    Each branch gets an i.i.d. uniform key and the arg-max key within a group wins,
    which is a uniform choice among the group's members.
    """
    device = generator.device if generator is not None else groups.device
    keys = torch.rand(groups.shape, generator=generator, device=device).to(groups.device)  # (Q, N)
    onehot = group_onehot(groups, mask) > 0  # (Q, N, G)
    keyed = torch.where(onehot, keys.unsqueeze(-1), torch.full_like(keys, -1.0).unsqueeze(-1))  # (Q, N, G)
    index = keyed.argmax(dim=1)  # (Q, G)
    exists = onehot.any(dim=1)  # (Q, G)
    return index, exists


def sample_pairs(groups: torch.Tensor, mask: torch.Tensor,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pick one uniformly random ordered pair of distinct real branches per group of two or more.

    Returns ``(first, second, has_pair)``, each ``(Q, G)``; meaningless where ``has_pair`` is False. The two
    branches with the largest i.i.d. uniform keys within a group form a uniform random pair.
    """
    device = generator.device if generator is not None else groups.device
    keys = torch.rand(groups.shape, generator=generator, device=device).to(groups.device)  # (Q, N)
    onehot = group_onehot(groups, mask) > 0  # (Q, N, G)
    keyed = torch.where(onehot, keys.unsqueeze(-1), torch.full_like(keys, -1.0).unsqueeze(-1))  # (Q, N, G)
    top = keyed.topk(min(2, groups.shape[1]), dim=1).indices  # (Q, 2, G); (Q, 1, G) with one branch, no pair
    return top[:, 0], top[:, -1], onehot.sum(dim=1) >= 2


#: Per-batch inputs a term may take as a keyword (LossTerm.draws), made from (groups, mask, generator) when the
#: caller brings none, in this order (reps before pairs: the order they consume the generator in).
DRAWS: dict[str, Callable] = {"reps": sample_representatives, "pairs": sample_pairs}


def _representative_probs(p_pos, mask, groups, generator, reps):
    if reps is None:
        reps = sample_representatives(groups, mask, generator)
    index, exists = reps
    p_pos = _zero_padding(p_pos, mask)
    # empty group slots get probability 0: they add nothing to sums and factor 1 to products
    return torch.gather(p_pos, 1, index) * exists.to(p_pos.dtype)  # (Q, G)


@register_loss("inter", ("p_pos", "mask", "groups"), draws=("reps",))
def inter_group_loss(p_pos: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor,
                     generator: torch.Generator | None = None, *,
                     reps: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Exactly one answer group should be true (soft version).

    With one random representative ``a_k`` per group:
    ``L_inter = (sum_k p+_{a_k} - 1)^2 + H(p_hat)``,
    ``p_hat_k = p+_{a_k} / sum_m p+_{a_m}``, ``H(p) = -sum_k p_k log p_k`` (natural log;
    ``p_hat`` uses ``sum + EPS`` and ``log`` is clamped at ``EPS`` so empty/zero groups are safe).
    ``reps`` (from :func:`sample_representatives`) overrides sampling so several
    terms can share the same draw.
    """
    return _mean_over_questions(inter_per_question(p_pos, mask, groups, generator, reps=reps), mask)


def inter_per_question(p_pos: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor,
                       generator: torch.Generator | None = None, *,
                       reps: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """(Q,) the value of :func:`inter_group_loss` for each question, before any mean over questions."""
    _check(p_pos, mask, groups)
    rep = _representative_probs(p_pos, mask, groups, generator, reps)  # (Q, G)
    s = rep.sum(dim=1)  # (Q,)
    p_hat = rep / (s.unsqueeze(1) + EPS)  # (Q, G)
    entropy = -(p_hat * torch.log(p_hat.clamp(min=EPS))).sum(dim=1)  # (Q,)
    return (s - 1) ** 2 + entropy


def group_count(groups: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(Q,) number of non-empty answer groups per question (0 for a question without real branches)."""
    return group_onehot(groups, mask).amax(dim=1).sum(dim=1)


@register_loss("supervised", ("p_pos", "p_neg", "mask", "labels"))
def supervised_loss(p_pos: torch.Tensor, p_neg: torch.Tensor, mask: torch.Tensor,
                    labels: torch.Tensor) -> torch.Tensor:
    """Supervised ceiling: ``sum_i BCE(p+_i, y_i) + BCE(p-_i, 1 - y_i)`` over real branches."""
    _check(p_pos, mask)
    assert labels.shape == p_pos.shape, f"labels must be {tuple(p_pos.shape)}, got {tuple(labels.shape)}"
    # padding may hold garbage probabilities/labels; make them valid BCE inputs, then drop them
    p_pos, p_neg = _zero_padding(p_pos, mask), _zero_padding(p_neg, mask)
    y = _zero_padding(labels.to(p_pos.dtype), mask)
    # F.binary_cross_entropy clamps log at -100, so saturated probabilities stay finite
    bce = (F.binary_cross_entropy(p_pos, y, reduction="none")
           + F.binary_cross_entropy(p_neg, 1 - y, reduction="none"))  # (Q, N)
    return _mean_over_questions(_zero_padding(bce, mask).sum(dim=1), mask)


def score(p_pos: torch.Tensor, p_neg: torch.Tensor) -> torch.Tensor:
    """Inference score ``0.5 * (p+ + 1 - p-)``: averages both contrastive views."""
    return 0.5 * (p_pos + 1 - p_neg)
