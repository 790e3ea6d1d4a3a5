"""The fit's training steps made cheap: what every step of a fit shares is computed once, and under the authors'
representative reductions only the rows of features the loss reads go through the probe.

Why: a `regime=authors` fit takes 3 restarts x 5000 full-batch epochs, so what a step repeats adds up 15000 times
(benchmarks/runs/run25_fit_speed.md: 52 s a restart on 40 questions before). Once per fit: the parsed loss spec, the
check of the group ids (`losses.groups_checked`), the optimizer's fused kernel and, for a full batch, the inter-group
terms' bucket weights (`losses_authors.question_buckets`). Once per draw of representatives and pairs (held for
`resample_every` epochs): the rows of features that draw names (:class:`DrawRows`). A full batch whose draws are held
is taken in question order: its random order would change no draw (they were made before it), only the order of
float sums, and gathering every feature in that order cost a copy of the whole training set per epoch.

Exactness: every probability a loss term reads is the same function of the same feature row as in the
straightforward loop, and each term is the registered one (losses.py, losses_authors.py) or, on the compact rows,
the same arithmetic on the rows it reads (:meth:`DrawRows.terms`), so a fit with the same seed gives the same probe
up to float rounding (matrix products over other row sets, sums in another order, the fused AdamW);
tests/test_fit_steps.py checks fits against that loop.

Dimensions: Q questions, N branches, D hidden size, G = N group slots; R representatives, P pairs, E pair branches
that represent no group (:class:`DrawRows`).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch

from .fit_inputs import NormalizedInputs
from .loss_spec import parse_loss_spec, staged_terms, total_loss
from .losses import DRAWS, EPS, LOSS_TERMS
from .losses_authors import bucket_mean

#: The representative reduction's terms that read probabilities only at the held draws' branches: the
#: representatives' (all four) and the pairs' (intra); :class:`DrawRows` computes them on those rows alone.
ROW_TERMS = ("nega", "intra", "inter", "inter_raw")


#: A step whose probe input holds fewer floats than this runs on one CPU thread. Its matrix products are too small to
#: gain from a second thread, and each op's fork and join cost more than the op: measured on a 2-core CPU shared with
#: other jobs (load 3.5-4), a 40-question regime=authors fit of 300 epochs took 71 s on torch's 2 threads and 2.5 s
#: on one (the loop before fit_steps.py, 1000 epochs: 455 s and 23 s), to the same numbers
#: (benchmarks/runs/run25_fit_speed.md).
#: 40 questions x 10 branches x 2 views x 576 dims is 0.46M floats; 400 questions (4.6M) keep torch's threads.
ONE_THREAD_BELOW = 2**21


@contextmanager
def cpu_threads_for(step_floats: int, device: torch.device):
    """One torch thread within the block when a step's input is small (ONE_THREAD_BELOW) on the CPU; restored after."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1 or step_floats >= ONE_THREAD_BELOW:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def make_optimizer(verifier: torch.nn.Module, config) -> torch.optim.Optimizer:
    """AdamW with the fit's lr and weight decay; the fused kernel where torch has one (a third of the per-tensor
    loop's time on a 2-core CPU for this 4-tensor probe, the same update)."""
    fused = next(verifier.parameters()).device.type in ("cpu", "cuda")
    return torch.optim.AdamW(verifier.parameters(), lr=config.lr, weight_decay=config.weight_decay,
                             fused=fused or None)


class DrawRows:
    """The feature rows one held draw names, out of the (Q * N * 2, D) rows of the normalised features, and the
    representative reduction's terms (ROW_TERMS) computed on them alone.

    Rows A: the representatives' x+, in the pooled (question, group) order the terms average in. Rows B: the
    representatives' x- in the same order, then x+ and x- of the pairs' branches that are not representatives (E of
    them). No other row is read. The inter-group terms read rows A alone, so a step that optimises only them
    (staged_terms' first stage) back-propagates through rows A alone; rows B then cost their forward pass only.
    The terms are losses_authors.py's, written on these vectors (a sum per question is an index_add over the
    representatives' questions) in the same order of operations, so they give its values up to float rounding."""

    def __init__(self, dense: torch.Tensor, mask: torch.Tensor, draws: dict) -> None:
        q, n = mask.shape
        device = mask.device
        index, exists = draws["reps"]  # (Q, G) each
        first, second, has_pair = draws["pairs"]  # (Q, G) each
        question = torch.arange(q, device=device).unsqueeze(1).expand(q, n)  # (Q, G)
        self.rep_q, rep_i = question[exists], index[exists]  # (R,) each; a branch represents at most one group
        pair_q = question[has_pair]  # (P,)
        r = self.rep_q.numel()
        # where each branch's p+ and p- sit in cat([p_a, p_b]): reps at r and r + R, the pairs' other branches after
        pos = torch.full((q, n), -1, dtype=torch.long, device=device)
        pos[self.rep_q, rep_i] = torch.arange(r, device=device)
        neg = pos + r
        extra = torch.zeros(q, n, dtype=torch.bool, device=device)
        extra[pair_q, first[has_pair]] = True
        extra[pair_q, second[has_pair]] = True
        extra_q, extra_i = (extra & (pos < 0)).nonzero(as_tuple=True)  # (E,) each
        e = extra_q.numel()
        pos[extra_q, extra_i] = 2 * r + torch.arange(e, device=device)
        neg[extra_q, extra_i] = 2 * r + e + torch.arange(e, device=device)
        self.pairs = tuple(t[pair_q, b[has_pair]] for t in (pos, neg) for b in (first, second))  # 4 x (P,)
        row = 2 * torch.arange(q * n, device=device).view(q, n)  # (Q, N): the x+ row; x- is the next one
        self.a = row[self.rep_q, rep_i]  # (R,)
        self.b = torch.cat([self.a + 1, row[extra_q, extra_i], row[extra_q, extra_i] + 1])  # (R + 2E,)
        rows = dense.reshape(q * n * 2, dense.shape[-1])  # a view
        self.xa, self.xb = rows[self.a], rows[self.b]  # (R, D), (R + 2E, D): copied once per draw
        self.n_questions = q

    def terms(self, verifier, names, buckets: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each of `names` (ROW_TERMS) as a differentiable scalar; ``buckets`` = question_buckets of the groups."""
        p_a = torch.sigmoid(verifier.mlp(self.xa).squeeze(-1))  # (R,) the representatives' p+
        p_b = torch.sigmoid(verifier.mlp(self.xb).squeeze(-1))  # (R + 2E,)
        values = {}
        if "nega" in names:  # negation_loss_representative
            neg = p_b[: p_a.numel()]
            values["nega"] = (torch.minimum(p_a, neg) ** 2 + (p_a + neg - 1) ** 2).mean()
        if "intra" in names:  # intra_group_loss_representative
            p = torch.cat([p_a, p_b])
            first_pos, second_pos, first_neg, second_neg = self.pairs
            values["intra"] = (((p[first_pos] - p[second_pos]) ** 2 + (p[first_neg] - p[second_neg]) ** 2).mean()
                               if first_pos.numel() else p_a.new_zeros(()))
        if "inter_raw" in names or "inter" in names:
            n_groups, weights = buckets
            total = p_a.new_zeros(self.n_questions).index_add(0, self.rep_q, p_a)  # (Q,) sum of the reps' p+
            if "inter_raw" in names:  # losses_variants.inter_raw_per_question, bucketed
                info = p_a.new_zeros(self.n_questions).index_add(0, self.rep_q, p_a * torch.log2(p_a.clamp(min=EPS)))
                values["inter_raw"] = bucket_mean((total - 1) ** 2 - info / n_groups.clamp(min=1), n_groups, weights)
            if "inter" in names:  # losses.inter_per_question, bucketed
                p_hat = p_a / (total[self.rep_q] + EPS)  # (R,)
                entropy = p_a.new_zeros(self.n_questions).index_add(0, self.rep_q,
                                                                    p_hat * torch.log(p_hat.clamp(min=EPS)))
                values["inter"] = bucket_mean((total - 1) ** 2 - entropy, n_groups, weights)
        return values


class FitSteps:
    """One restart's loss on its batches: `batches(order)` then `loss(verifier, idx, draws, gen)` for each."""

    def __init__(self, normalized: NormalizedInputs, mask: torch.Tensor, groups: torch.Tensor,
                 labels: torch.Tensor | None, answer_ids: torch.Tensor | None, spec, config) -> None:
        self.normalized, self.mask, self.groups, self.labels, self.answer_ids = (normalized, mask, groups, labels,
                                                                                  answer_ids)
        self.config = config
        self.weights = parse_loss_spec(spec)  # once, not at every step
        self.curriculum = 0.0 if labels is not None else config.curriculum
        n_q = normalized.shape[0]
        self.batch = config.batch_questions or n_q
        self.full_batch = self.batch >= n_q
        self.held_draws = config.resample_every > 1
        entries = [LOSS_TERMS[config.reduction].get(t) or LOSS_TERMS["all"][t] for t in self.weights]
        needs = {d for entry in entries for d in entry.draws}
        # draws that depend on the batch's groups only: a full batch makes them once
        self.held = ({name: DRAWS[name](groups, mask) for name in needs if name not in ("reps", "pairs")}
                     if self.full_batch else {})
        self.compact = (self.full_batch and self.held_draws and labels is None and normalized.dense is not None
                        and config.reduction == "representative" and set(self.weights) <= set(ROW_TERMS))
        self.rows: DrawRows | None = None
        self.buckets = self.held.get("buckets")  # the inter-group terms' group counts and bucket weights

    def step_floats(self) -> int:
        """Floats of probe input in one step: the drawn rows (compact steps) or a batch's features."""
        if self.rows is not None:
            return self.rows.xa.numel() + self.rows.xb.numel()
        return min(self.batch, self.normalized.shape[0]) * math.prod(self.normalized.shape[1:])

    def draw(self, gen: torch.Generator) -> dict:
        """A held draw of representatives and pairs for every question (reps first: the generator's order)."""
        draws = {name: DRAWS[name](self.groups, self.mask, gen) for name in ("reps", "pairs")}
        self.rows = DrawRows(self.normalized.dense, self.mask, draws) if self.compact else None
        return draws

    def batches(self, order: torch.Tensor) -> list[torch.Tensor | None]:
        """The epoch's batches of question indices; [None] (every question, in order) for a full batch with held
        draws."""
        if self.full_batch and self.held_draws:
            return [None]
        return list(order.to(self.normalized.device).split(self.batch))

    def loss(self, verifier, idx: torch.Tensor | None, draws: dict | None,
             gen: torch.Generator) -> tuple[torch.Tensor, dict[str, float]]:
        """``(total, terms)`` as `loss_spec.total_loss` returns them, for the questions `idx` (None: all, in order)."""
        if self.rows is not None:
            return self._compact_loss(verifier)
        pick = slice(None) if idx is None else idx
        held = {**self.held, **(draws or {})}
        held = held if idx is None else {name: tuple(t[idx] for t in draw) for name, draw in held.items()}
        p_pos, p_neg = verifier.head(self.normalized[pick])
        return total_loss(p_pos, p_neg, self.mask[pick], self.groups[pick], self.weights, gen,
                          None if self.labels is None else self.labels[pick], curriculum=self.curriculum,
                          answer_ids=None if self.answer_ids is None else self.answer_ids[pick],
                          reduction=self.config.reduction, draws=held or None)

    def _compact_loss(self, verifier) -> tuple[torch.Tensor, dict[str, float]]:
        values = self.rows.terms(verifier, self.weights, self.buckets)
        values = {t: values[t] for t in self.weights}  # the spec's order, as total_loss sums them
        active = staged_terms(values, self.curriculum)
        total = sum(self.weights[t] * v for t, v in values.items() if t in active)
        return total, {t: float(v.detach()) for t, v in values.items()}
