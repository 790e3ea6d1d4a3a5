"""LoVer training objectives over batched, padded solution branches.

Dimension names used throughout this module:

* ``Q`` -- questions in the batch,
* ``N`` -- solution branches per question (padded; ``mask`` marks real ones),
* ``G`` -- answer groups per question.  Group ids live in ``[0, N)`` so we
  always allocate ``G = N`` group slots; unused slots are simply empty.
* ``A`` -- distinct answer strings across the batch (only :func:`balance_loss` looks across questions).

Every loss takes probabilities ``p_pos = p(x+)`` and ``p_neg = p(x-)`` of shape
``(Q, N)``, sums its per-branch / per-group terms within each question and
then averages over the questions that have at least one real branch.  All
functions are vectorised over questions (one-hot ``(Q, N, G)`` membership
matrices instead of Python loops) so they run as a handful of tensor ops.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

EPS = 1e-8

_INTER_TERMS = ("inter", "inter_raw", "inter_logic")
#: An answer string takes part in :func:`balance_loss` once it is a candidate in this many questions of a batch:
#: two-answer tasks and iGSM's 23 residues pass in any 64-question batch, GSM8K's numbers almost never do.
BALANCE_MIN_QUESTIONS = 5

_TERM_RE = re.compile(r"^(?:(?P<w>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*\*\s*)?(?P<t>[A-Za-z_]+)$")


@dataclass(frozen=True)
class LossTerm:
    """A registered loss term: the pure function and which batch tensors it takes, in order."""

    function: Callable[..., torch.Tensor]
    inputs: tuple[str, ...]
    """Names among p_pos, p_neg, mask, groups, answer_ids, labels, passed positionally."""
    draws: tuple[str, ...]
    """Random draws it takes as keywords: ``reps`` (:func:`sample_representatives`, shared by every term of a
    step) and/or ``pairs`` (:func:`sample_pairs`)."""


#: How a term reduces over branches and questions: "all" = the paper's equations (sums over every branch and
#: pair, then the mean over questions); "representative" = the authors' code (losses_authors.py, registered by
#: importing the core package). inter_logic, balance and supervised have no representative variant and keep theirs.
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


def _check(p_pos: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor | None = None) -> None:
    assert p_pos.ndim == 2, f"probabilities must be (Q, N), got {tuple(p_pos.shape)}"
    assert mask.shape == p_pos.shape, f"mask must be {tuple(p_pos.shape)}, got {tuple(mask.shape)}"
    if groups is not None:
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
                           reps: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """(Q,) the value of :func:`inter_raw_loss` for each question, before any mean over questions."""
    _check(p_pos, mask, groups)
    rep = _representative_probs(p_pos, mask, groups, generator, reps)  # (Q, G), 0 in empty slots
    n_groups = group_count(groups, mask).clamp(min=1)  # (Q,)
    self_info = -(rep * torch.log2(rep.clamp(min=EPS))).sum(dim=1)  # (Q,); empty slots add 0 * log(EPS) = 0
    return (rep.sum(dim=1) - 1) ** 2 + self_info / n_groups


def group_count(groups: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(Q,) number of non-empty answer groups per question (0 for a question without real branches)."""
    return group_onehot(groups, mask).amax(dim=1).sum(dim=1)


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
    terms at once, because the features separate the answers' texts (benchmarks/RESULTS.md run 10). With
    ``p_hat`` the normalised group distribution of :func:`inter_group_loss`, for every answer string ``a``
    that is a candidate in ``n_a >= min_questions`` questions of the batch:
    ``c_a = (1/n_a) sum_{q contains a} p_hat_{q,a}`` (how often ``a`` is chosen where it could be) and
    ``u_a = (1/n_a) sum_{q contains a} 1/G_q`` (the same for a verifier without preference), and
    ``L_balance = mean_a (c_a - u_a)^2``.  Branches without an answer (``answer_ids = -1``) do not count.
    A constant answer on a two-answer task costs 0.25; answers split in proportion to chance cost 0.
    Measured (RESULTS.md run 11, weight 10): it breaks the constant answer on four of five two-answer sets,
    but the split it finds is no better than the constant, so it is not a default.
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


#: Loss terms understood by :func:`parse_loss_spec` / :func:`total_loss`.
ALLOWED_TERMS = tuple(LOSS_TERMS["all"])


def score(p_pos: torch.Tensor, p_neg: torch.Tensor) -> torch.Tensor:
    """Inference score ``0.5 * (p+ + 1 - p-)``: averages both contrastive views."""
    return 0.5 * (p_pos + 1 - p_neg)


def parse_loss_spec(spec: str | dict[str, float]) -> dict[str, float]:
    """Parse ``"nega+0.5*intra+inter_logic"`` into ``{"nega": 1.0, "intra": 0.5, "inter_logic": 1.0}``."""
    if isinstance(spec, dict):
        items = list(spec.items())
    else:
        if not isinstance(spec, str) or not spec.strip():
            raise ValueError(f"loss spec must be a non-empty string like 'nega+intra+inter', got {spec!r}")
        items = []
        for part in spec.split("+"):
            match = _TERM_RE.match(part.strip())
            if match is None:
                raise ValueError(f"cannot parse loss term {part.strip()!r} in {spec!r}; "
                                 f"expected 'term' or 'weight*term' with term in {', '.join(ALLOWED_TERMS)}")
            items.append((match["t"], float(match["w"]) if match["w"] else 1.0))
    out: dict[str, float] = {}
    for term, weight in items:
        if term not in ALLOWED_TERMS:
            raise ValueError(f"unknown loss term {term!r}; allowed terms: {', '.join(ALLOWED_TERMS)}")
        if term in out:
            raise ValueError(f"loss term {term!r} appears twice in {spec!r}")
        weight = float(weight)
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"weight of loss term {term!r} must be finite and >= 0, got {weight}")
        out[term] = weight
    if not out:
        raise ValueError(f"loss spec {spec!r} names no terms; allowed terms: {', '.join(ALLOWED_TERMS)}")
    return out


def loss_terms(p_pos: torch.Tensor, p_neg: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor,
               terms, generator: torch.Generator | None = None,
               labels: torch.Tensor | None = None, answer_ids: torch.Tensor | None = None,
               reduction: str = "all", draws: dict | None = None) -> dict[str, torch.Tensor]:
    """Each named term as a differentiable scalar; the terms drawing representatives share one draw (drawn here
    unless ``draws`` brings it). ``answer_ids`` (Q, N): one id per answer string across the batch, -1 for none
    (only ``balance`` reads it)."""
    if "supervised" in terms and labels is None:
        raise ValueError("loss term 'supervised' needs labels, but labels=None")
    if "balance" in terms and answer_ids is None:
        raise ValueError("loss term 'balance' needs answer_ids (one id per answer string across questions), "
                         "but answer_ids=None")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction={reduction!r} is unknown; use one of {', '.join(REDUCTIONS)}")
    entries = {t: LOSS_TERMS[reduction].get(t) or LOSS_TERMS["all"][t] for t in terms}
    needed = {d for entry in entries.values() for d in entry.draws}
    draws = dict(draws or {})
    if "reps" in needed and "reps" not in draws:
        draws["reps"] = sample_representatives(groups, mask, generator)
    if "pairs" in needed and "pairs" not in draws:
        draws["pairs"] = sample_pairs(groups, mask, generator)
    inputs = {"p_pos": p_pos, "p_neg": p_neg, "mask": mask, "groups": groups, "answer_ids": answer_ids,
              "labels": labels}
    return {term: entry.function(*(inputs[name] for name in entry.inputs), **{d: draws[d] for d in entry.draws})
            for term, entry in entries.items()}


def staged_terms(values: dict[str, torch.Tensor], threshold: float) -> set[str]:
    """Which terms a curriculum step optimises (the authors' code, threshold 0.2 there).

    While the inter-group term exceeds ``threshold`` only it is optimised: the negation term alone is
    solved by a probe that reads which template it sees (p+ -> 0, p- -> 1 for every branch), and
    once there the inter term's gradient through the saturated sigmoid is too small to leave.
    Next, while the negation term exceeds ``threshold``: negation + intra-group. Then all terms.
    ``threshold <= 0`` or a spec without an inter-group term: all terms, always.
    """
    inter = [t for t in values if t in _INTER_TERMS]
    if threshold <= 0 or not inter:
        return set(values)
    if sum(float(values[t].detach()) for t in inter) > threshold:
        return set(inter)
    if "nega" in values and float(values["nega"].detach()) > threshold:
        return {t for t in values if t in ("nega", "intra")}
    return set(values)


def total_loss(p_pos: torch.Tensor, p_neg: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor,
               spec: str | dict[str, float], generator: torch.Generator | None = None,
               labels: torch.Tensor | None = None, curriculum: float = 0.0,
               answer_ids: torch.Tensor | None = None, reduction: str = "all",
               draws: dict | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted sum of the terms in ``spec`` (only those :func:`staged_terms` picks, with a curriculum).

    Returns ``(total, terms)`` where ``total`` is the differentiable scalar and
    ``terms`` maps each term name to its unweighted value as a float (all terms, optimised or not).
    """
    weights = parse_loss_spec(spec)
    values = loss_terms(p_pos, p_neg, mask, groups, weights, generator, labels, answer_ids, reduction, draws)
    active = staged_terms(values, curriculum)
    total = sum(weights[t] * v for t, v in values.items() if t in active)
    return total, {t: float(v.detach()) for t, v in values.items()}
