"""Label-free selectors from the model's own per-token statistics (`Branch.stats`, token_stats.py), registered with
the other strategies (selection.py).

Each reads one statistic per kept token of every branch (`logprob`, `topk_logprob`, `kl_uniform`; short3 reads only
token counts), reduces it to a path score, and picks through `selection.pick_group`, so ties resolve exactly like the
other strategies (within TIE_TOLERANCE; larger group, then lowest branch index). Only branches with an answer win.
None reads `question.gold`. Names and parameters were fixed before any result:

- self_certainty (Kang et al. 2025): path score = mean kl_uniform; group = max.
- self_certainty_borda: Borda votes (N - r + 1)^0.5 by self-certainty rank r, summed per group.
- deepconf10_w32 / deepconf90_w32 (Fu et al. 2025, offline): lowest 32-token window mean of C = -topk_logprob;
  keep the top 10% / 90% of traces, vote weighted by that score.
- cisc_t0.1 (Taubenfeld et al. 2025): vote weighted by softmax(mean logprob / 0.1) over the N branches.
- loglik_max / loglik_vote: best mean logprob / vote weighted by exp(mean logprob).
- short3 (Hassid et al. 2025, short-m@k with m = 3): majority among the 3 paths with the fewest tokens.
- inv_entropy_full (Sharma & Chopra 2025, arXiv 2511.02309): vote weighted by 1 / mean token entropy, the entropy over
  the full vocabulary (the paper's is over an API's top-k, k open; `entropy` is the whole distribution's).
- softsc_min (Wang et al. 2024, Soft Self-Consistency, aggregation `min`): the path's lowest token probability over
  its answer span; group = max (the single best-scored path's answer).

A path with no tokens has no mean: it gets score -inf (ranks last, votes with weight 0) and wins only by ties.
"""

from __future__ import annotations

import numpy as np

from .answers import Answer
from .selection import Question, _needs_branches, pick_group, register_strategy

#: What to do about branches without `stats` (decoded before the statistics existed).
STATS_FIX = ("decode with this version or rescore the bank: benchmarks/selectors/rescore_bank.py; lover_hf adds them "
             "to banked branches")
#: Borda exponent p (Kang et al.'s example; p = 0 would be majority).
BORDA_POWER = 0.5
#: DeepConf's sliding window W, in tokens (theirs 2048 on traces up to 64k tokens; ours are <= 512).
DEEPCONF_WINDOW = 32
#: CISC's softmax temperature T (no published default; fixed here before any result).
CISC_TEMPERATURE = 0.1
#: short-m@k's m.
SHORT_M = 3
#: Inverse-entropy voting's floor on a path's mean entropy (nats): a path whose every token was certain to float16
#: precision has mean entropy 0, and 1 / 0 would let it outvote any number of others; 1e-3 caps its weight at 1000.
ENTROPY_FLOOR = 1e-3


def token_stat(question: Question, strategy: str, name: str) -> list[np.ndarray]:
    """Per branch, the (tokens,) float64 values of statistic `name`; ValueError naming the fix when one is missing."""
    branches = _needs_branches(question, strategy)
    values = []
    for index, branch in enumerate(branches):
        stats = getattr(branch, "stats", None)  # absent on Branch objects built before the field existed
        if stats is None:
            raise ValueError(f"strategy={strategy!r} needs per-token statistics, but branch {index} has stats=None "
                             f"(decoded before they existed): {STATS_FIX}.")
        if name not in stats:
            raise ValueError(f"strategy={strategy!r} needs the per-token statistic {name!r}, but branch {index}'s "
                             f"stats hold only {sorted(stats)}: {STATS_FIX}.")
        values.append(np.asarray(stats[name], dtype=np.float64))
    return values


def path_means(values: list[np.ndarray]) -> np.ndarray:
    """(N,) mean per path; -inf for a path without tokens (its mean is undefined: it can only win by ties)."""
    return np.array([v.mean() if v.size else -np.inf for v in values])


def self_certainty_scores(question: Question, strategy: str) -> np.ndarray:
    """(N,) self-certainty: mean over the path's tokens of KL(U || p) (`kl_uniform`)."""
    return path_means(token_stat(question, strategy, "kl_uniform"))


@register_strategy("self_certainty")
def self_certainty(question: Question) -> str:
    """Group score = max over its branches of s_i = mean_j kl_uniform_ij (Kang et al. 2025: the most self-certain
    path's answer).

    Example: answers 5, 6, 6 with kl_uniform [2, 4], [1, 2, 3], [2.5]: s = 3, 2, 2.5; 5 -> 3 > 6 -> max(2, 2.5) =
    2.5: "5" (majority would say 6)."""
    return pick_group(question.members, self_certainty_scores(question, "self_certainty"), np.max)


@register_strategy("self_certainty_borda")
def self_certainty_borda(question: Question) -> str:
    """Borda vote (Kang et al. 2025): rank the N branches by self-certainty s_i (rank r = 1 the highest; equal scores
    ranked by branch index); branch of rank r casts (N - r + 1)^p votes, p = BORDA_POWER = 0.5; group = sum.
    Branches without an answer take a rank but cast no vote.

    Example: the branches of `self_certainty` (answers 5, 6, 6; s = 3, 2, 2.5): ranks 1, 3, 2, votes sqrt(3),
    sqrt(1), sqrt(2) = 1.732, 1, 1.414; 5 -> 1.732 < 6 -> 2.414: "6" (self_certainty says 5)."""
    scores = self_certainty_scores(question, "self_certainty_borda")
    n = len(scores)
    order = np.argsort(-scores, kind="stable")  # stable: equal scores keep branch order
    rank = np.empty(n)
    rank[order] = np.arange(1, n + 1)
    return pick_group(question.members, (n - rank + 1) ** BORDA_POWER, np.sum)


def lowest_window_mean(confidence: np.ndarray, window: int = DEEPCONF_WINDOW) -> float:
    """DeepConf's lowest group confidence: min over every run of `window` consecutive tokens of their mean
    confidence; a path shorter than the window is one window (the whole path); -inf without tokens."""
    if confidence.size == 0:
        return -np.inf
    if confidence.size <= window:
        return float(confidence.mean())
    sums = np.cumsum(np.concatenate(([0.0], confidence)))  # window sum over [s, s + W) = sums[s + W] - sums[s]
    return float(((sums[window:] - sums[:-window]) / window).min())


def kept_count(eta: int, n: int) -> int:
    """ceil(eta / 100 * n), at least 1: in integers, as float eta / 100 * n can land just above a whole number."""
    return max(1, -(-eta * n // 100))


def deepconf(question: Question, eta: int, strategy: str) -> str:
    """DeepConf offline (Fu et al. 2025). Token confidence C_j = -topk_logprob_j (minus the mean of the top-20
    log-probs); trace score S_i = min over 32-token windows of mean C (`lowest_window_mean`); keep the
    kept_count(eta, n) traces of highest S among the n traces with an answer (equal S by branch index), then group
    score = sum of S over its kept traces.

    The cut ranks only the traces with an answer, as the authors' offline analysis does (it keeps the traces with an
    extracted answer first): a top trace without an answer would otherwise leave nothing to vote for.

    Example: answers 5, 6, 5. Trace 0: 40 tokens, C = 7 for the first 8 and 5 after: the 9 windows have mean
    5 + 2 (8 - s) / 32 for start s = 0..8, lowest 5.0 (its whole-path mean is 5.4). Trace 1: 10 tokens of C = 5.2,
    shorter than W: S = 5.2. Trace 2: C = 6.5 then 32 tokens of 4.5: windows (6.5 + 31 * 4.5) / 32 = 4.5625 and 4.5:
    S = 4.5. eta = 10 keeps ceil(0.3) = 1 trace, trace 1: "6" (whole-path means would keep trace 0: 5.4 > 5.2).
    eta = 90 keeps ceil(2.7) = 3: 5 -> 5.0 + 4.5 = 9.5 > 6 -> 5.2: "5"."""
    confidence = [-c for c in token_stat(question, strategy, "topk_logprob")]
    scores = np.array([lowest_window_mean(c) for c in confidence])
    answered = [i for i, answer in enumerate(question.answers) if answer is not None]
    kept = set(sorted(answered, key=lambda i: (-scores[i], i))[:kept_count(eta, len(answered))])
    members = {answer: [i for i in branches if i in kept] for answer, branches in question.members.items()}
    # An empty kept trace (S = -inf) votes with weight 0 instead of sinking its group to -inf.
    weights = np.where(np.isfinite(scores), scores, 0.0)
    return pick_group({a: b for a, b in members.items() if b}, weights, np.sum)


for _eta in (10, 90):
    _name = f"deepconf{_eta}_w{DEEPCONF_WINDOW}"
    register_strategy(_name)(lambda question, eta=_eta, name=_name: deepconf(question, eta, name))


def loglik_means(question: Question, strategy: str) -> np.ndarray:
    """(N,) mean token logprob of each path (its length-normalised sequence log-probability)."""
    return path_means(token_stat(question, strategy, "logprob"))


@register_strategy(f"cisc_t{CISC_TEMPERATURE}")
def cisc(question: Question) -> str:
    """CISC (Taubenfeld et al. 2025): confidence c_i = mean token logprob; weights w = softmax(c / T) over the N
    branches, T = CISC_TEMPERATURE = 0.1; group = sum of w.

    Example: answers 5, 6, 6 with logprobs [-0.05, -0.15], [-0.3], [-0.2, -0.5, -0.35]: c = -0.1, -0.3, -0.35;
    c / T = -1, -3, -3.5; exp = 0.36788, 0.04979, 0.03020 (sum 0.44787); w = 0.8214, 0.1112, 0.0674:
    5 -> 0.8214 > 6 -> 0.1786: "5"."""
    z = loglik_means(question, f"cisc_t{CISC_TEMPERATURE}") / CISC_TEMPERATURE
    finite = np.isfinite(z)
    weights = np.zeros_like(z)  # every path empty: all weights 0, a tie the tie rule settles
    if finite.any():
        weights[finite] = np.exp(z[finite] - z[finite].max())  # shifted by the max: no overflow at T = 0.1
        weights /= weights.sum()
    return pick_group(question.members, weights, np.sum)


@register_strategy("loglik_max")
def loglik_max(question: Question) -> str:
    """Group score = max of c_i = mean token logprob (the most likely path, length-normalised).

    Example: the branches of `cisc_t0.1` (c = -0.1, -0.3, -0.35): 5 -> -0.1 > 6 -> -0.3: "5"."""
    return pick_group(question.members, loglik_means(question, "loglik_max"), np.max)


@register_strategy("loglik_vote")
def loglik_vote(question: Question) -> str:
    """Vote weighted by exp(c_i), each path's geometric-mean token probability; group = sum.

    Example: the branches of `cisc_t0.1` (c = -0.1, -0.3, -0.35): weights 0.90484, 0.74082, 0.70469;
    5 -> 0.90484 < 6 -> 1.44551: "6" (CISC's sharper T = 0.1 says 5)."""
    return pick_group(question.members, np.exp(loglik_means(question, "loglik_vote")), np.sum)


@register_strategy(f"short{SHORT_M}")
def short_m(question: Question) -> str:
    """short-m@k (Hassid et al. 2025), m = SHORT_M = 3: majority vote among the m paths with the fewest tokens (equal
    lengths by branch index); paths without an answer count toward the m but cast no vote. Reads only token counts,
    so it needs no `stats`. Vote ties go to the larger group, then the lowest branch index, as everywhere here (the
    paper breaks them by the shortest path instead).

    Example (three branches): answers 5, 6, 6 with 9, 2, 4 tokens: all three are the 3 shortest: "6". With two more,
    (none) with 3 tokens and 5 with 1: the 3 shortest are branches 4 (5), 1 (6), 3 (none): 5 -> 1 = 6 -> 1, a tie
    that goes to the lowest branch index, branch 1: "6" (majority over all five ties 2-2 and says 5, branch 0)."""
    branches = _needs_branches(question, f"short{SHORT_M}")
    shortest = set(sorted(range(len(branches)), key=lambda i: (len(branches[i].token_ids), i))[:SHORT_M])
    members = {answer: [i for i in indices if i in shortest] for answer, indices in question.members.items()}
    return pick_group({a: b for a, b in members.items() if b}, np.ones(len(branches)), np.sum)


@register_strategy("inv_entropy_full")
def inverse_entropy(question: Question) -> str:
    """Inverse-entropy weighted voting (Sharma & Chopra 2025, arXiv 2511.02309): H_i = mean over the path's tokens of
    the next-token distribution's Shannon entropy; weight w_i = 1 / max(H_i, ENTROPY_FLOOR); group = sum of w.

    Our `entropy` statistic (token_stats.step_stats) is -sum_v p_v ln p_v over the WHOLE vocabulary, in nats; the
    paper's is over the top-k tokens an API returns, renormalised, in bits, with k left open. The base scales every
    weight alike (no pick changes); the top-k truncation does change H, so this row fixes k = V ("full" in its name).
    A path without tokens has no mean: weight 0.

    Example: answers 5, 6, 6 with entropy [0.2, 0.4], [1.0, 1.0, 1.0], [2.0]: H = 0.3, 1.0, 2.0, w = 3.333, 1, 0.5:
    5 -> 3.333 > 6 -> 1.5: "5" (majority says 6). With H = 0.8 for the 5: w = 1.25 < 1.5: "6"."""
    means = path_means(token_stat(question, "inv_entropy_full", "entropy"))
    weights = np.where(np.isfinite(means), 1.0 / np.maximum(np.where(np.isfinite(means), means, 1.0), ENTROPY_FLOOR),
                       0.0)
    return pick_group(question.members, weights, np.sum)


def span_lowest_probability(logprobs: np.ndarray, offsets: list[tuple[int, int]], answer: Answer | None) -> float:
    """Soft-SC's `min` over the answer: the lowest probability exp(logprob_j) among the tokens j whose character span
    overlaps the answer's (the tokens `answers.span_confidence` averages CoT-decoding's margins over); 0 without an
    answer or without such a token."""
    if answer is None:
        return 0.0
    inside = [lp for lp, (s, e) in zip(logprobs, offsets) if s < answer.end and e > answer.start]
    return float(np.exp(min(inside))) if inside else 0.0


@register_strategy("softsc_min")
def soft_self_consistency_min(question: Question) -> str:
    """Soft Self-Consistency with `min` aggregation (Wang, Prasad, Stengel-Eskin & Bansal 2024; their code scores each
    sampled action by its lowest token probability and takes the argmax): s_i = min over the tokens of branch i's
    stated answer of p(token) (`span_lowest_probability`, from the `logprob` statistic); group = max.

    In their agent tasks the scored tokens are the whole action; here the action is the stated answer, so the span is
    the answer's, as CoT-decoding's confidence reads it.

    Example: "it is 5" with answer tokens logprob [-0.1] -> s = exp(-0.1) = 0.905; "it is 16" twice, each answer two
    tokens with logprobs [-0.05, -0.7] -> s = exp(-0.7) = 0.497: 5 -> 0.905 > 16 -> 0.497: "5" (majority: 16)."""
    logprobs = token_stat(question, "softsc_min", "logprob")
    scores = np.array([span_lowest_probability(lp, b.offsets, a)
                       for lp, b, a in zip(logprobs, question.branches, question.answers)])
    return pick_group(question.members, scores, np.max)
