"""A loss spec ("nega+0.5*intra+inter") over the registered terms of losses.py: parsed, evaluated and summed, with the
authors' curriculum choosing which terms a step optimises. Dimension names as in losses.py (Q questions, N branches).
"""

from __future__ import annotations

import math
import re

import torch

from .losses import DRAWS, LOSS_TERMS, REDUCTIONS

_INTER_TERMS = ("inter", "inter_raw", "inter_logic")

_TERM_RE = re.compile(r"^(?:(?P<w>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*\*\s*)?(?P<t>[A-Za-z_]+)$")


def allowed_terms() -> tuple[str, ...]:
    """Loss terms understood by :func:`parse_loss_spec` / :func:`total_loss`: every registered one (the variants in
    losses_variants.py register when the core package is imported), the supervised ceiling last."""
    return tuple(sorted(LOSS_TERMS["all"], key=lambda term: term == "supervised"))


def parse_loss_spec(spec: str | dict[str, float]) -> dict[str, float]:
    """Parse ``"nega+0.5*intra+inter_logic"`` into ``{"nega": 1.0, "intra": 0.5, "inter_logic": 1.0}``."""
    allowed = allowed_terms()  # once a call: total_loss parses the spec on every training step
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
                                 f"expected 'term' or 'weight*term' with term in {', '.join(allowed)}")
            items.append((match["t"], float(match["w"]) if match["w"] else 1.0))
    out: dict[str, float] = {}
    for term, weight in items:
        if term not in allowed:
            raise ValueError(f"unknown loss term {term!r}; allowed terms: {', '.join(allowed)}")
        if term in out:
            raise ValueError(f"loss term {term!r} appears twice in {spec!r}")
        weight = float(weight)
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"weight of loss term {term!r} must be finite and >= 0, got {weight}")
        out[term] = weight
    if not out:
        raise ValueError(f"loss spec {spec!r} names no terms; allowed terms: {', '.join(allowed)}")
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
    for name, make in DRAWS.items():
        if name in needed and name not in draws:
            draws[name] = make(groups, mask, generator)
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
