"""RPC (Zhou et al., NeurIPS 2025, "A Theoretical Study on Bridging Internal Probability and Self-Consistency for LLM
Reasoning"; the authors' compute_rpc.py, read, not copied): reasoning pruning, then perplexity consistency.

Per question, each path's probability is p_i = exp(mean token log-prob) (their `mean_logprob`). A two-component
Weibull mixture is fitted to the N values of p by maximum likelihood; the component with the higher mean is the
"high" one. A path is pruned when the mixture gives it to the low component (membership r_high < r_low) AND p_i lies
below the mean of p. Then answers vote: a group's score is the sum of p over its kept paths, a completion that
occurs several times in the group counted once. The answer of the highest group wins (our tie rule: `pick_group`).

What they fix is fixed here the same way: the initial guess (w1, k1, lambda1, k2, lambda2) = (0.5, 1, 1, 1.5, 2), the
bounds w1 in [0.2, 0.8] and every shape and scale >= 0.01. What differs: they minimise with scipy's L-BFGS-B, which
this package does not depend on; here torch's L-BFGS (strong Wolfe line search) minimises the same likelihood over a
reparametrisation that keeps those bounds (w1 = 0.2 + 0.6 sigmoid(a), k = 0.01 + softplus(b)), from the same start.
A fit that ends non-finite prunes nothing (their code would keep its non-finite parameters). A path without tokens
has p = 0: it is left out of the fit and pruned (the Weibull density at 0 is 0 or infinite). How often the two
optimisers prune alike is measured in benchmarks/selectors/selectors2_rows.py.

Dimensions: N branches.
"""

from __future__ import annotations

import math

import numpy as np

from .selection import Question, _needs_branches, pick_scored, register_strategy
from .selectors import loglik_means

#: The authors' initial guess (w1, k1, lambda1, k2, lambda2).
INITIAL = (0.5, 1.0, 1.0, 1.5, 2.0)
#: Their bounds: w1 in [W_LOW, W_HIGH], shapes and scales >= POSITIVE_FLOOR.
W_LOW, W_HIGH, POSITIVE_FLOOR = 0.2, 0.8, 0.01
#: L-BFGS iterations at most, with scipy's default tolerances otherwise (gradient 1e-5). On 10 points the likelihood
#: often has no finite optimum (a component narrowing onto one point), which an optimiser chases until a cap; 100 and
#: 500 iterations pruned alike on 40 random questions, at 0.2 s instead of 0.44 s a question (one busy CPU thread).
MAX_ITER = 100


def _softplus_inverse(y: float) -> float:
    return y + math.log(-math.expm1(-y))


def weibull_log_pdf(x, k, lam, log=np.log):
    """log of the Weibull density f(x; k, lam) = k / lam (x / lam)^(k - 1) exp(-(x / lam)^k), x > 0; `log` is the
    array library's (np.log, or torch.log inside the fit)."""
    z = x / lam
    return log(k / lam) + (k - 1) * log(z) - z ** k


def fit_weibull_mixture(p: np.ndarray) -> tuple[float, float, float, float, float] | None:
    """(w1, k1, lambda1, k2, lambda2) maximising sum_i log(w1 f(p_i; k1, lambda1) + (1 - w1) f(p_i; k2, lambda2)) over
    the bounds, from `INITIAL`, ordered so that component 1 has the higher mean lambda Gamma(1 + 1/k); None when the
    optimum is not finite. `p`: (M,) positive values."""
    import torch  # here, not at the top: select/ (and rows.py, plain data) import without torch

    x = torch.as_tensor(p, dtype=torch.float64)
    w0, k1, l1, k2, l2 = INITIAL
    start = [math.log((w0 - W_LOW) / (W_HIGH - w0)),  # the inverses of `unpack`'s maps: the fit starts at INITIAL
             *(_softplus_inverse(v - POSITIVE_FLOOR) for v in (k1, l1, k2, l2))]
    theta = torch.tensor(start, dtype=torch.float64, requires_grad=True)

    def unpack(t):
        w = W_LOW + (W_HIGH - W_LOW) * torch.sigmoid(t[0])
        return (w, *(POSITIVE_FLOOR + torch.nn.functional.softplus(t[i]) for i in range(1, 5)))

    def nll():
        w, a, b, c, d = unpack(theta)
        both = torch.stack([w.log() + weibull_log_pdf(x, a, b, torch.log),
                             (1 - w).log() + weibull_log_pdf(x, c, d, torch.log)])
        return -torch.logsumexp(both, dim=0).sum()

    optimizer = torch.optim.LBFGS([theta], max_iter=MAX_ITER, line_search_fn="strong_wolfe",
                                  tolerance_grad=1e-5, tolerance_change=1e-9)

    def closure():
        optimizer.zero_grad()
        loss = nll()
        if torch.isfinite(loss):
            loss.backward()
        return loss

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 5 parameters, 10 points: a second thread only adds synchronisation (2-3x slower)
    try:
        with torch.enable_grad():
            optimizer.step(closure)
    finally:
        torch.set_num_threads(threads)
    with torch.no_grad():
        found = [float(v) for v in unpack(theta)]
        final = float(nll())
    if not all(math.isfinite(v) for v in [*found, final]):
        return None
    w, a, b, c, d = found
    if b * math.gamma(1 + 1 / a) < d * math.gamma(1 + 1 / c):  # component 1 must be the high-probability one
        w, a, b, c, d = 1 - w, c, d, a, b
    return w, a, b, c, d


def pruned(p: np.ndarray, fitted: tuple[float, ...] | None) -> np.ndarray:
    """(N,) bool: the paths RPC's reasoning pruning drops. A path is dropped when its membership in the high
    component is below its membership in the low one AND p_i < mean(p); a path with p = 0 is always dropped; with no
    fit (None) only those are."""
    out = p <= 0
    if fitted is None:
        return out
    w, k1, l1, k2, l2 = fitted
    positive = np.where(p > 0, p, 1.0)  # any positive stand-in: the p = 0 paths are dropped above
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        high = np.log(w) + weibull_log_pdf(positive, k1, l1)
        low = np.log(1 - w) + weibull_log_pdf(positive, k2, l2)
    return out | ((high < low) & (p < p.mean()))


def rpc_group_scores(p: np.ndarray, completions: list[str], members: dict[str, list[int]],
                     drop: np.ndarray) -> dict[str, float]:
    """{answer: sum of p over its kept paths (not `drop`), each distinct (completion, p) once}: the authors' union of
    per-completion probability sets, so a completion repeated by several paths votes once."""
    return {answer: float(sum(value for _, value in {(completions[i], float(p[i])) for i in indices if not drop[i]}))
            for answer, indices in members.items()}


def rpc_scores(mean_logprobs: np.ndarray, completions: list[str], members: dict[str, list[int]]
               ) -> tuple[dict[str, float], np.ndarray]:
    """({answer: group score}, (N,) pruned mask): p = exp(mean log-prob), the mixture fitted on the positive p,
    pruning by `pruned`, the vote by `rpc_group_scores`."""
    p = np.exp(np.asarray(mean_logprobs, dtype=np.float64))  # -inf (no tokens) -> 0
    positive = p[p > 0]
    drop = pruned(p, fit_weibull_mixture(positive) if positive.size else None)
    return rpc_group_scores(p, completions, members, drop), drop


@register_strategy("rpc")
def rpc(question: Question) -> str:
    """RPC (module docstring): prune by the Weibull mixture, then vote by summed path probability, identical
    completions counted once.

    Example (tests/test_rpc.py): answers 5, 5, 6, 6 with mean log-probs giving p = 0.9, 0.9 (the same completion
    twice), 0.5, 0.45: the 5 counts 0.9 once; if neither 6 is pruned, 6 -> 0.95 > 5 -> 0.9: "6"; majority ties 2-2
    and says 5 (branch 0)."""
    branches = _needs_branches(question, "rpc")
    scores, _ = rpc_scores(loglik_means(question, "rpc"), [b.text for b in branches], question.members)
    return pick_scored(question.members, scores)
