"""Scoring: from results to verifier scores -- batching, the test-time fit, label-free orientation, warnings.

Answer groups come from the task's extractor, `answers.stated_answers` and `answers.answer_groups`, the rule
selection uses too. The
unsupervised path never touches a gold answer; only `gold_labels` (the supervised ceiling's input) takes them,
and nothing label-free calls it.

Dimensions: Q questions, N branches (padded to the largest), D hidden size.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from ..select.answers import answer_groups, get_extractor, matches_gold, span_confidence, stated_answer, stated_answers
from .fit_inputs import verifier_on
from .losses import score
from ..select.selection import select
from ..stats import spearman
from .fit_cache import FITS
from .verifier_config import VerifierConfig

from ...log import log


def batch_results(results, extract: str):
    """Stack results into (features (Q, N, 2, D), mask (Q, N), groups (Q, N), answers per question).

    Group ids follow `answers.answer_groups` (branches without an answer form one group of their own).
    """
    extractor = get_extractor(extract)
    n_max = max(len(r.branches) for r in results)
    dim = results[0].stored_features.shape[-1]
    # In the results' own precision (half for a half model: the fit upcasts batch by batch), float32 if mixed.
    dtypes = {r.stored_features.dtype for r in results}
    dtype = dtypes.pop() if len(dtypes) == 1 else torch.float32
    features = torch.zeros((len(results), n_max, 2, dim), dtype=dtype)  # (Q, N, 2, D)
    mask = torch.zeros((len(results), n_max), dtype=torch.bool)
    groups = torch.zeros((len(results), n_max), dtype=torch.long)
    answers = []
    for q, result in enumerate(results):
        n = len(result.branches)
        features[q, :n] = result.stored_features
        mask[q, :n] = True
        values = [a.value if a is not None else None for a in stated_answers(extractor, result.branches)]
        groups[q, :n] = torch.tensor(answer_groups(values))
        answers.append(values)
    return features, mask, groups, answers


def task_batch(results, extract: str, device: str | torch.device | None = None):
    """`batch_results`' (features, mask, groups, answers) with the tensors on `device` (None: where they are, the
    CPU): what a task's test-time fit, the probes fitted beside it and the rank checks read, stacked and moved once
    per task and handed to each (a copy of the task's features apiece before)."""
    features, mask, groups, answers = batch_results(results, extract)
    if device is not None:
        features, mask, groups = features.to(device), mask.to(device), groups.to(device)
    return features, mask, groups, answers


def answer_ids(answers: list[list[str | None]], width: int) -> torch.Tensor:
    """(Q, width) long: the same id for the same answer string in every question, -1 for no answer and padding."""
    ids: dict[str, int] = {}
    out = torch.full((len(answers), width), -1, dtype=torch.long)
    for q, row in enumerate(answers):
        for i, value in enumerate(row):
            if value is not None:
                out[q, i] = ids.setdefault(value, len(ids))
    return out


def gold_labels(answers: list[list[str | None]], gold: list[str], width: int, extract: str | None = None
                ) -> torch.Tensor:
    """(Q, N) 1.0 where a branch's extracted answer is the gold answer (equal, or by `extract`'s equivalence:
    `answers.matches_gold`), 0.0 elsewhere and on padding."""
    extractor = None if extract is None else get_extractor(extract)
    return torch.tensor([[float(a == g or matches_gold(extractor, a, g)) for a in row] + [0.0] * (width - len(row))
                         for row, g in zip(answers, gold)])


def store_scores(results, verifier, features: torch.Tensor, name: str) -> None:
    """Score the results' padded features (Q, N, 2, D) and keep p+ / p- as `result.verifier_probs[name]`."""
    with torch.no_grad():
        p_pos, p_neg = (p.cpu() for p in verifier_on(verifier, features))  # (Q, N) each; one copy off a GPU
    for q, result in enumerate(results):
        n = len(result.branches)
        result.verifier_probs[name] = torch.stack([p_pos[q, :n], p_neg[q, :n]], dim=-1).numpy()  # (N, 2)


def vote_shares(answers: list[list[str | None]], width: int) -> torch.Tensor:
    """(Q, N) share of its question's branches that give a branch's answer; 0 without an answer and on padding."""
    return torch.tensor([[row.count(a) / len(row) if a is not None else 0.0 for a in row] + [0.0] * (width - len(row))
                         for row in answers])


def branch_confidences(results, extract: str, width: int) -> torch.Tensor:
    """(Q, N) CoT-decoding's confidence in each branch's answer (mean top1-top2 margin over the answer span; 0 without
    an answer and on padding)."""
    extractor = get_extractor(extract)
    return torch.tensor([[span_confidence(b.margins, b.offsets, stated_answer(extractor, b)) for b in r.branches]
                         + [0.0] * (width - len(r.branches)) for r in results])


def orient_fit(verifier, by: str, results, extract: str, features: torch.Tensor, mask: torch.Tensor,
               answers: list[list[str | None]]) -> float:
    """`orient_by` with the signal VerifierConfig.orient=`by` names (vote shares or CoT-decoding confidences), from
    `batch_results`' outputs."""
    width = mask.shape[1]
    signal = vote_shares(answers, width) if by == "vote" else branch_confidences(results, extract, width)  # (Q, N)
    return orient_by(verifier, features, mask, signal)


def orient_by(verifier, features: torch.Tensor, mask: torch.Tensor, signal: torch.Tensor) -> float:
    """Label-free orientation (VerifierConfig.orient): flip the verifier when, over the real branches of `features`
    (Q, N, 2, D), its scores fall as the per-branch `signal` (Q, N) rises (vote share, or CoT-decoding confidence).

    Returns the Spearman correlation of the unflipped scores with the signal (flipped when < 0).
    """
    verifier.orientation.fill_(1.0)
    with torch.no_grad():
        scores = score(*verifier_on(verifier, features)).cpu()  # (Q, N)
    mask = mask.cpu()  # the signal comes from the results, on the CPU
    correlation = spearman(scores[mask], signal.cpu()[mask])
    if correlation < 0:
        verifier.orientation.fill_(-1.0)
    return correlation


def one_sided(scores: list[np.ndarray], share: float = 0.95) -> str | None:
    """'false' when in at least `share` of the questions no branch scores above 0.5, 'true' when in at least
    `share` of them every branch does; else None. `scores` holds one (N,) array per question.

    A label-free sign of a degenerate fit, judged on what selection sees: a question whose every branch is called
    false gets its answer from differences among "false" verdicts, not from a learnt notion of correctness (the
    "every answer false" corner of benchmarks/runs/run03_gpu_gsm8k400_hotpotqa_bbh.md). Per question, not per
    branch: a held-out fit whose highest score was 0.258 (median 0.067) called every answer false, yet only 70% of
    its branches lay within 0.05 of 0.
    """
    scores = [s for s in scores if s.size]
    if not scores:
        return None
    if np.mean([s.max() <= 0.5 for s in scores]) >= share:
        return "false"
    if np.mean([s.min() > 0.5 for s in scores]) >= share:
        return "true"
    return None


#: A selection that gives one answer to this share of at least this many answered questions is named as answering
#: one way: by the test-time fit's warning, `lover compare`'s leaderboard and the selectors' benchmark table.
CONSTANT_ANSWER_SHARE, CONSTANT_ANSWER_MIN_QUESTIONS = 0.95, 20


def constant_answer(picks: list[str], share: float = CONSTANT_ANSWER_SHARE,
                    min_questions: int = CONSTANT_ANSWER_MIN_QUESTIONS) -> str | None:
    """The answer picked in at least `share` of the questions with an answer ("" = no branch gave one; at least
    `min_questions` of them), else None.

    A label-free sign of a fit that separated the answers' texts instead of right from wrong: on a task with few
    possible answers (yes/no, True/False) it then gives the same answer to every question, and scores that
    answer's base rate (every binary test-time fit on the full BBH sets did:
    benchmarks/runs/run10_bbh_navigate_full.md).
    """
    answered = [pick for pick in picks if pick]
    if len(answered) < min_questions:
        return None
    answer, top_share = top_pick(answered)
    return answer if top_share >= share else None


def top_pick(picks: list[str]) -> tuple[str, float] | None:
    """The most common of the questions' picks and its share among the answered questions ("" = no branch gave an
    answer); None when no question was answered."""
    answered = Counter(pick for pick in picks if pick)
    if not answered:
        return None
    answer, count = answered.most_common(1)[0]
    return answer, count / answered.total()


def fit_on_results(results, extract: str, config: VerifierConfig | None = None,
                   device: str | torch.device | None = None, batch: tuple | None = None):
    """Test-time fit: train label-free on these results' own branches, then score them in place; returns the
    `FitResult` (its verifier, final losses). The fit runs on `device` (the model's, e.g. a GPU; default the CPU,
    where the results' features are) and once per distinct input in a process (fit_cache.FITS: `lover compare`'s
    refits on the test-time fit's inputs reuse it). `batch`: the results' `task_batch` on `device`, if made already."""
    config = config or VerifierConfig()
    features, mask, groups, answers = batch or task_batch(results, extract, device)
    ids = answer_ids(answers, mask.shape[1]).to(mask.device)
    fitted = FITS.fit(features, mask, groups, config, answer_ids=ids)
    verifier = fitted.verifier
    if config.orient != "none":
        correlation = orient_fit(verifier, config.orient, results, extract, features, mask, answers)
        log.info("test-time fit: Spearman(score, %s) = %+.3f -> %s", config.orient, correlation,
                 "flipped" if correlation < 0 else "kept")
    store_scores(results, verifier, features, "lover")
    for result in results:  # lover_select checks it against the task's own extractor
        result.fit_extract = extract
    return fitted


def unparsed_counts(results, extract: str) -> tuple[int, int]:
    """(branches that state no answer, questions with no branch that states one): `stated_answer`'s view."""
    extract_answer = get_extractor(extract)
    parsed = [[stated_answer(extract_answer, b) is not None for b in r.branches] for r in results]
    return sum(row.count(False) for row in parsed), sum(not any(row) for row in parsed)


def warn_if_one_sided(results, task: str | None) -> None:
    """Log a warning when the test-time fit of a task called (almost) every branch false or true."""
    corner = one_sided([r.scores("lover") for r in results])
    if corner is not None:
        log.warning("the test-time fit on %d questions of %s called every answer %s in >= 95%% of them (%s branch "
                    "above a score of 0.5): LoVer's pick among the answers is then close to arbitrary; compare it "
                    "with majority voting before trusting it (lover compare), or use a verifier trained with "
                    "`lover train`.", len(results), task or "this run", corner,
                    "no" if corner == "false" else "every")


def warn_if_constant_answer(results, task: str | None, extract: str) -> None:
    """Log a warning when LoVer(sum) with the test-time fit gives (almost) every question the same answer."""
    extract_answer = get_extractor(extract)
    picks = [select(r, "lover_sum", extract_answer) for r in results]
    answer = constant_answer(picks)
    if answer is not None:
        share = top_pick(picks)[1]
        log.warning("the test-time fit on %d questions of %s picks the answer %r in %.0f%% of them: it has separated "
                    "the answers' texts, not right from wrong, so LoVer scores that answer's base rate; compare it "
                    "with majority voting and greedy decoding before trusting it (lover compare).",
                    len(results), task or "this run", answer, 100 * share)


#: A fit whose branch scores rank against both label-free signals below this Spearman correlation is named as running
#: backwards (`warn_if_reversed`). Fixed before its first use (issue Selectors II): at 1.5B GSM8K the default fit's
#: AUROC was 0.221, its lover_max 0.39 below majority on the held-out arithmetic set, and nothing said so.
REVERSED_BELOW = -0.3


def rank_checks(results, extract: str, names, answers: list[list[str | None]] | None = None
                ) -> dict[str, dict[str, float]]:
    """Per scorer in `names` (`result.verifier_probs` keys), the Spearman correlation of its branch scores with each
    branch's vote share ("vote") and with CoT-decoding's confidence in its answer ("confidence"), over every real
    branch of `results` (the branches the fit saw; without an answer both signals are 0, as `orient_by` reads them).
    Label-free: both signals are the model's own; 0 where a signal or the scores are constant (`spearman`).
    `answers`: the task's `task_batch` answers, if extracted already."""
    width, extractor = max(len(r.branches) for r in results), get_extractor(extract)
    if answers is None:  # batch_results' answers, without stacking the features
        answers = [[a.value if a is not None else None for a in stated_answers(extractor, r.branches)]
                   for r in results]
    mask = torch.tensor([[i < len(r.branches) for i in range(width)] for r in results])
    signals = {"vote": vote_shares(answers, width)[mask],
               "confidence": branch_confidences(results, extract, width)[mask]}
    checks = {}
    for name in names:
        scores = torch.cat([torch.as_tensor(r.scores(name), dtype=torch.float64) for r in results])
        checks[name] = {signal: round(float(spearman(scores, values.double())), 4)
                        for signal, values in signals.items()}
    return checks


def warn_if_reversed(checks: dict[str, dict[str, float]], task: str | None, questions: int) -> list[str]:
    """Log one warning per scorer whose `rank_checks` correlations with the vote share AND with CoT-decoding's
    confidence are both below `REVERSED_BELOW`: its highest-scored branches are those both signals rank last, so its
    *_max row most likely picks wrong answers. Returns the scorers named."""
    flagged = [name for name, found in checks.items()
               if all(found[signal] < REVERSED_BELOW for signal in ("vote", "confidence"))]
    for name in flagged:
        log.warning("the test-time %s fit on %d questions of %s ranks against both label-free signals (Spearman "
                    "%+.2f with the vote share, %+.2f with CoT-decoding's confidence, both below %.1f): its top "
                    "branches are the ones the vote and the confidence rank last, so its picks are likely wrong; "
                    "compare it with majority voting (lover compare) or refit oriented by the vote: "
                    "fit_config=orient=vote.", name, questions, task or "this run", checks[name]["vote"],
                    checks[name]["confidence"], REVERSED_BELOW)
    return flagged
