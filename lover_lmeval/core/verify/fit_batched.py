"""A linear probe's restarts trained together: K tries as one (K, D) weight, one optimizer step for all of them.

Why: CCS (Burns et al.) trains 10 tries x 1000 full-batch epochs of a linear probe. One try at a time that is
10,000 optimizer steps whose every op is tiny ((Q*N*2, D) @ (D,)), so the fit cost ~1.3 s a try, bound by per-op
overhead whatever the task's size, and every run that fits a task pays it. Together, a step computes
every try's probabilities with one (Q*N*2, D) @ (D, K) product, and the loss is the sum over tries of each try's
loss, the registered terms (losses.py) vmapped over tries.

Why it is the same optimisation: the sum's gradient with respect to try k's parameters is try k's own loss's
gradient (no term mixes tries), and AdamW updates every element from that element's gradient and state alone
(decoupled weight decay included), so each try follows the trajectory it follows alone, up to float rounding (the
product's shape, a loss summed over questions in order rather than in the epoch's shuffled order, which a full batch
makes irrelevant). A try whose loss turns non-finite drops out of the sum from that step on (`torch.where`, so its
NaN reaches no other try) and is reported as the sequential loop reports it: no history. tests/test_fit_batched.py
checks fits against verifier.py's sequential loop.

Which fits (`trains_together`): a linear probe (n_hidden_layers=0), full-batch steps, the paper's reduction ("all")
with terms that draw nothing per step, no labels, no curriculum: CCS's regime. Everything else takes the loop.

Dimensions: K tries, Q questions, N branches, D hidden size, T loss terms.
"""

from __future__ import annotations

import torch
from torch import nn

from .fit_inputs import NormalizedInputs
from .fit_steps import cpu_threads_for
from .loss_spec import parse_loss_spec
from .losses import LOSS_TERMS, groups_checked


def trains_together(config, labels: torch.Tensor | None, n_questions: int) -> bool:
    """Whether `fit` trains this config's restarts together (module docstring): its loss is then exactly the sum of
    per-try losses that `train_together` computes."""
    terms = [LOSS_TERMS["all"].get(term) for term in parse_loss_spec(config.losses)]
    return (config.n_hidden_layers == 0 and labels is None and config.curriculum <= 0
            and config.reduction == "all" and config.resample_every == 1
            and (config.batch_questions == 0 or config.batch_questions >= n_questions)
            and all(term is not None and not term.draws for term in terms))


def _per_try_loss(p_pos: torch.Tensor, p_neg: torch.Tensor, batch: dict[str, torch.Tensor],
                  weights: dict[str, float]) -> torch.Tensor:
    """(K, T + 1): each registered term of `weights` per try, then their weighted sum (the try's total), from
    (K, Q, N) probabilities; `batch` holds the unbatched inputs the terms take (mask, groups, answer_ids)."""

    def terms(pos, neg):  # one try's (Q, N) probabilities -> (T + 1,)
        given = {"p_pos": pos, "p_neg": neg, **batch}
        values = [LOSS_TERMS["all"][name].function(*(given[i] for i in LOSS_TERMS["all"][name].inputs))
                  for name in weights]
        total = sum(weight * value for weight, value in zip(weights.values(), values))
        return torch.stack([*values, total])

    return torch.func.vmap(terms)(p_pos, p_neg)


def train_together(verifiers: list[nn.Module], normalized: NormalizedInputs, mask: torch.Tensor, groups: torch.Tensor,
                   answer_ids: torch.Tensor | None, config) -> list[list[dict] | None]:
    """Train every linear `verifiers[k]` (its initial weights are try k's) for `config.epochs` full-batch steps
    together; their weights are set to the trained ones. Returns per try what `verifier.train_restart` returns: one
    row of epoch-mean terms per epoch, or None for a try whose loss turned non-finite."""
    weights_of = parse_loss_spec(config.losses)
    dense = normalized.dense if normalized.dense is not None else normalized[slice(None)]  # (Q, N, 2, D)
    layers = [verifier.mlp[0] for verifier in verifiers]
    weight = nn.Parameter(torch.cat([layer.weight.detach() for layer in layers]))  # (K, D)
    bias = nn.Parameter(torch.cat([layer.bias.detach() for layer in layers]))  # (K,)
    fused = weight.device.type in ("cpu", "cuda")  # as fit_steps.make_optimizer: the same update, fewer kernels
    optimizer = torch.optim.AdamW([weight, bias], lr=config.lr, weight_decay=config.weight_decay, fused=fused or None)
    batch = {"mask": mask, "groups": groups, "answer_ids": answer_ids}
    alive = torch.ones(len(verifiers), dtype=torch.bool, device=weight.device)  # (K,)
    rows = []  # per epoch, (K, T + 1) detached on the CPU
    with groups_checked(), cpu_threads_for(dense.numel(), dense.device):
        for _ in range(config.epochs):
            p = torch.sigmoid(dense @ weight.T + bias).movedim(-1, 0)  # (Q, N, 2, K) -> (K, Q, N, 2)
            values = _per_try_loss(p[..., 0], p[..., 1], batch, weights_of)  # (K, T + 1)
            alive &= torch.isfinite(values[:, -1])
            loss = torch.where(alive, values[:, -1], torch.zeros_like(values[:, -1])).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            rows.append(values.detach().cpu())
    with torch.no_grad():
        for k, layer in enumerate(layers):
            layer.weight.copy_(weight[k: k + 1])
            layer.bias.copy_(bias[k: k + 1])
    table = torch.stack(rows) if rows else torch.zeros(0, len(verifiers), len(weights_of) + 1)  # (epochs, K, T + 1)
    names = [*weights_of, "total"]
    return [[{"epoch": epoch, **dict(zip(names, table[epoch, k].tolist()))} for epoch in range(table.shape[0])]
            if alive[k] else None for k in range(len(verifiers))]
