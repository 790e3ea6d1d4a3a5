"""`lover view`'s page: what view.py read, turned into one JSON object and inlined with view_page.html's styles and
script into a single HTML file that opens from disk (no server, no network: attachable to a CI run or a pull request).

The rows' intervals are `lover compare`'s: each row's 95% bootstrap interval and its paired interval against majority
over the same questions, from core.stats with the resamples seeded as compare seeds them (`stats.interval_rng`), so a
compare folder's own paired interval of lover_sum against majority is reproduced exactly (tests/test_view.py). Each
row's verdict colours it as the README's figure does (benchmarks/selectors/leaderboard_figure.py: matplotlib's tab:green
above majority, tab:red below, tab:blue holding 0).

The data is compact because a full GSM8K test run (1,319 questions x 10 branches) must open and scroll smoothly: per
branch its text, answer, finish reason, tokens, scores and, from the bank, its CoT margin and character length per
token, each as one character of a 64-letter alphabet (`encode_margins`, `encode_lengths`); the page builds the DOM of
the visible questions only. Gold answers are shown: the page is a report after the fact, nothing selects from it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from ..core.decode.branch import Branch
from ..core.select.answers import answer_members, get_extractor, matches_gold, span_confidence, stated_answers
from ..core.select.rows import ROWS
from ..core.select.selection import ORACLES, SCORES_READ, pick_group
from ..core.stats import bootstrap_interval, interval_rng, paired_bootstrap
from ..core.store.bank import BranchBank
from ..core.verify.scoring import REVERSED_BELOW, constant_answer, one_sided, top_pick

TEMPLATE = Path(__file__).with_name("view_page.html")
PLACEHOLDER = "/*LOVER_VIEW_DATA*/"
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
LONG = "~"  # in a length code: add len(ALPHABET) - 1 to the next letter's value
#: Verdicts of a row's paired interval against majority, coloured as the README's figure.
COLOURS = {"above": "#2ca02c", "below": "#d62728", "holds": "#1f77b4"}


@dataclass
class TaskInput:
    """One task as read from a run (view.py), questions in doc_id order."""

    name: str
    extract: str
    metric: str
    doc_ids: list[int]
    table: dict[str, np.ndarray]
    """Row -> (Q,) 0/1, as the run's metric scored each row's pick."""
    gold: list[str | None]
    picks: dict[str, list[str | None]]
    """Row -> each question's pick ("" none, None unknown)."""
    prompts: list[str | None]
    texts: list[list[str] | None]
    finish: list[list[str]]
    scores: list[dict[str, list[float]]]
    """Per question, scorer -> each branch's score p_i (LoVer, the probes, P(True), compare's extra verifiers)."""
    reported: dict[str, float]
    """Row -> the accuracy the run itself reported (lm-eval's results, compare's leaderboard)."""
    fit: dict | None
    intervals: dict[str, tuple[float, float]] | None = None
    answers: list[list[str | None]] | None = None
    tokens: list[list[int]] | None = None
    confidence: list[list[float]] | None = None
    """Per question each branch's CoT confidence, where the run logged it (a compare folder's branches.jsonl)."""
    one_answer: dict[str, dict] | None = None
    branches: list[list[Branch] | None] = field(default_factory=list)
    """Per question the bank's branches (tokens, margins, offsets, stats), None where the bank has none."""
    references: dict[str, np.ndarray] = field(default_factory=dict)
    """Reference -> (Q,) its value per question (avg@N, pass@k, maj@k: they read the gold answer), apart from the
    rows."""


def bank_branches(path: Path, wanted: set, signature) -> dict:
    """signature -> the bank's branches of the first record whose `signature(branches)` is in `wanted`."""
    bank, found = BranchBank(path), {}
    for key in bank.keys():
        branches = bank.get(key)
        if branches and (sig := signature(branches)) in wanted and sig not in found:
            found[sig] = branches
    return found


def untagged(row: str) -> str:
    """A row's name without the tag saying how many gold labels made its verifier ("lover_max[dev66]")."""
    return re.sub(r"\[.*\]$", "", row)


def row_scorer(row: str, scorers) -> tuple[str, str] | None:
    """(scorer, "max" | "sum") of a row that groups branch scores by max or sum: majority by votes, cot_* by
    CoT-decoding's confidence, the others by a scorer's p_i; None for any other row."""
    base = untagged(row)
    if base == "majority":
        return "votes", "sum"
    prefix, _, reduce = base.rpartition("_")
    if reduce not in ("max", "sum"):
        return None
    name = SCORES_READ.get(base) or prefix
    return (name, reduce) if name == "cot" or name in scorers else None


def row_data(task: TaskInput, n_boot: int, seed: int) -> list[dict]:
    """Each row: accuracy as the run reported it, 95% interval, paired difference against majority and its verdict."""
    order = [row for row in ROWS if row in task.table] + sorted(set(task.table) - set(ROWS))
    base = task.table.get("majority")
    rows = []
    for row in order:
        correct = task.table[row]
        low, high = (task.intervals or {}).get(row) or bootstrap_interval(correct, n_boot,
                                                                           interval_rng(seed, task.name, row))
        entry = {"name": row, "acc": task.reported.get(row, float(correct.mean())), "mean": float(correct.mean()),
                 "low": low, "high": high, "n": int(len(correct)), "oracle": untagged(row) in ORACLES}
        if base is not None and row != "majority" and not entry["oracle"]:
            paired = paired_bootstrap(correct, base, n_boot, interval_rng(seed, task.name, row, "majority"))
            verdict = "above" if paired["low"] > 0 else "below" if paired["high"] < 0 else "holds"
            entry.update(paired=paired, verdict=verdict, colour=COLOURS[verdict])
        known = [p for p in task.picks.get(row, []) if p is not None]
        share = (task.one_answer or {}).get(row, {})
        if share.get("one_answer") or (known and constant_answer(known) is not None):
            entry["one_answer"] = share.get("top_pick_share") or top_pick(known)[1]
        rows.append(entry)
    return rows


_LETTERS = np.frombuffer(ALPHABET.encode(), dtype=np.uint8)


def encode_margins(margins: list[float]) -> str:
    """One letter a token: its CoT margin p(top1) - p(top2) in [0, 1], to 1/63."""
    index = np.clip(np.rint(np.asarray(margins, dtype=np.float64) * 63), 0, 63).astype(np.intp)
    return _LETTERS[index].tobytes().decode()


def encode_lengths(lengths: list[int]) -> str:
    """One letter a token (LONG first for each 63 more): its length in the text. Offsets are contiguous
    (branch.make_branch: each token starts where the one before ended), so lengths place every token."""
    if max(lengths, default=0) < 63:
        return _LETTERS[np.asarray(lengths, dtype=np.intp)].tobytes().decode()
    return "".join(LONG * (n // 63) + ALPHABET[n % 63] for n in lengths)


def token_lengths(text: str, offsets: list[tuple[int, int]]) -> list[int]:
    """Each token's length as the page's JavaScript counts: UTF-16 code units (characters, but for those beyond the
    Basic Multilingual Plane, such as emoji, which count two)."""
    if text.isascii() or max(text, default=" ") < "\U00010000":
        return [e - s for s, e in offsets]
    return [len(text[s:e].encode("utf-16-le")) // 2 for s, e in offsets]


def utf16(text: str, index: int) -> int:
    """A character position of `text` in UTF-16 code units (`token_lengths`)."""
    head = text[:index]
    return index if head.isascii() or max(head) < "\U00010000" else len(head.encode("utf-16-le")) // 2


def _contiguous(branch: Branch) -> bool:
    ends = [0] + [e for _, e in branch.offsets[:-1]]
    return len(branch.margins) == len(branch.offsets) > 0 and all(s == e for (s, _), e in zip(branch.offsets, ends))


def _number(value) -> float | None:
    """A score for JSON: None where a diverged verifier left NaN or infinity."""
    return round(float(value), 4) if np.isfinite(value) else None


def pick_margins(task: TaskInput, q: int, members: dict, values: list, cot: list, sortable: list[tuple]) -> list:
    """Per sortable row, how far its pick's group score lies above the best other group's (votes for majority, the
    max or sum of the group's CoT confidences or p_i for the others): 0 is a tie, small a near thing; None without a
    second group."""
    margins = []
    for row, (name, reduce) in sortable:
        scores = task.scores[q].get(name, []) if name not in ("votes", "cot") else cot if name == "cot" else values
        per_branch = np.ones(len(values)) if name == "votes" else np.array(
            [np.nan if s is None else s for s in scores], dtype=float)
        if len(per_branch) != len(values) or np.isnan(per_branch).any() or len(members) < 2:
            margins.append(None)
            continue
        reducer = np.max if reduce == "max" else np.sum
        group = {answer: float(reducer(per_branch[m])) for answer, m in members.items()}
        pick = task.picks.get(row, [None] * len(task.doc_ids))[q]
        pick = pick if pick in group else pick_group(members, per_branch, reducer)
        margins.append(round(group[pick] - max(s for a, s in group.items() if a != pick), 4))
    return margins


def question_data(task: TaskInput, q: int, extract, rows: list[str], scorers: list[str], sortable: list[tuple]) -> dict:
    """One question as the page reads it (keys kept short: 1,319 of these make a full GSM8K page). Per branch: text,
    answer, finish reason, tokens, CoT confidence, scores (`scorers` order), margin and length codes, answer span."""
    banked, n = task.branches[q], len(task.finish[q])
    if banked is None and task.texts[q] is None:  # a compare folder's question its bank did not hold: logged answers
        branches, found, values = [Branch("", [], [], [], f) for f in task.finish[q]], [None] * n, task.answers[q]
    else:
        branches = banked or [Branch(t, [], [], [], f) for t, f in zip(task.texts[q], task.finish[q])]
        found = stated_answers(extract, branches)
        values = [a.value if a else None for a in found]
    cot = ([round(span_confidence(b.margins, b.offsets, a), 4) for b, a in zip(branches, found)] if banked
           else task.confidence[q] if task.confidence else [None] * n)
    tokens = [len(b.token_ids) for b in banked] if banked else task.tokens[q] if task.tokens else [None] * n
    out = []
    for k, (branch, answer) in enumerate(zip(branches, found)):
        shaded = banked is not None and _contiguous(branch)
        span = [utf16(branch.text, answer.start), utf16(branch.text, answer.end)] if answer else [-1, -1]
        out.append([branch.text, values[k], branch.finish_reason, tokens[k], cot[k],
                    [_number(task.scores[q][name][k]) if name in task.scores[q] else None for name in scorers],
                    encode_margins(branch.margins) if shaded else "",
                    encode_lengths(token_lengths(branch.text, branch.offsets)) if shaded else "", *span])
    members = answer_members(values)
    # the page marks a branch right when its answer is "g": the group that is the gold answer by the extractor's
    # equivalence (math: 0.5 for a gold \frac{1}{2}), else the gold as the run read it
    gold = next((answer for answer in members if matches_gold(extract, answer, task.gold[q])), task.gold[q])
    return {"d": task.doc_ids[q], "p": task.prompts[q], "g": gold,
            "o": "".join("-" if np.isnan(v) else str(int(v)) for v in (task.table[r][q] for r in rows)),
            "k": [task.picks[r][q] if r in task.picks else None for r in rows], "gr": list(members.items()),
            "b": out, "m": pick_margins(task, q, members, values, cot, sortable)}


def task_warnings(task: TaskInput, rows: list[dict], questions: list[dict]) -> list[dict]:
    """What a reader should know before trusting a row: a fit running backwards ("bad", in red), one-answer rows, a
    one-sided fit, branches without an answer and branches the token budget cut."""
    notes, fit = [], task.fit or {}
    checks = fit.get("rank_checks", {})
    for name in checks.get("reversed", []):
        notes.append({"level": "bad", "text": f"the test-time {name} fit runs backwards: Spearman "
                      f"{checks[name]['vote']:+.2f} with the vote share and {checks[name]['confidence']:+.2f} with "
                      f"CoT-decoding's confidence (both below {REVERSED_BELOW}): its top branches are those both "
                      "signals rank last, so its picks are likely wrong (refit with fit_config=orient=vote)"})
    if fit.get("skipped"):
        notes.append({"level": "info", "text": fit["skipped"]})
    for row in rows:
        if row.get("one_answer"):
            notes.append({"level": "warn", "text": f"{row['name']} gives one answer to {row['one_answer']:.0%} of the "
                          "answered questions: a gain over majority there can be that answer's share of the gold "
                          "answers, not selection"})
    lover = [np.asarray(s["lover"]) for s in task.scores if "lover" in s]
    corner = one_sided(lover) if len(lover) == len(task.scores) and lover else None
    if corner:
        notes.append({"level": "warn", "text": f"the test-time fit calls every answer {corner} in >= 95% of the "
                      "questions: LoVer's pick among them is then close to arbitrary"})
    branches = [b for q in questions for b in q["b"]]
    unparsed, without = sum(b[1] is None for b in branches), sum(not q["gr"] for q in questions)
    cut = sum(b[2] == "length" for b in branches)
    if unparsed:
        notes.append({"level": "info", "text": f"{unparsed} of {len(branches)} branches state no answer the "
                      f"{task.extract!r} extractor reads; {without} of {len(questions)} questions have none in any"})
    if cut:
        notes.append({"level": "info", "text": f"{cut} of {len(branches)} branches ({cut / len(branches):.0%}) were "
                      "cut at the token budget (finish: length); a cut branch states an answer only if it marked one"})
    return notes


def reference_data(task: TaskInput, n_boot: int, seed: int) -> list[dict]:
    """Each reference's mean over questions and 95% bootstrap interval (seeded as the rows' are)."""
    out = []
    for name, values in task.references.items():
        low, high = bootstrap_interval(values, n_boot, interval_rng(seed, task.name, name))
        out.append({"name": name, "acc": float(values.mean()), "low": low, "high": high, "n": int(len(values))})
    return out


def task_data(task: TaskInput, n_boot: int, seed: int) -> dict:
    extract = get_extractor(task.extract)
    rows = row_data(task, n_boot, seed)
    names = [row["name"] for row in rows]
    scorers = sorted(set().union(*(s.keys() for s in task.scores))) if task.scores else []
    sortable = [(row, found) for row in names if (found := row_scorer(row, scorers))
                and (found[0] != "cot" or task.confidence or any(b is not None for b in task.branches))]
    questions = [question_data(task, q, extract, names, scorers, sortable) for q in range(len(task.doc_ids))]
    checks = {name: found for name, found in (task.fit or {}).get("rank_checks", {}).items() if name != "reversed"}
    return {"name": task.name, "extract": task.extract, "metric": task.metric, "rows": rows,
            "references": reference_data(task, n_boot, seed), "scorers": scorers,
            "sortable": [row for row, _ in sortable], "fit": task.fit, "checks": checks,
            "reversed": (task.fit or {}).get("rank_checks", {}).get("reversed", []),
            "banked": sum(b is not None for b in task.branches), "warnings": task_warnings(task, rows, questions),
            "questions": questions}


def finite(value):
    """`value` (what a run's files hold: JSON) with NaN and infinities as None, which JavaScript's JSON.parse reads (a
    diverged fit's final loss is NaN in the provenance; JSON has no NaN)."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    return [finite(item) for item in value] if isinstance(value, (list, tuple)) else value


def page_data(kind: str, facts: dict, provenance: dict, tasks: list[TaskInput], n_boot: int, seed: int) -> dict:
    for task in tasks:
        task.fit = finite(task.fit)
    return {"kind": kind, "version": __version__, "n_boot": n_boot, "seed": seed, "reversed_below": REVERSED_BELOW,
            "facts": finite(facts), "provenance": finite(provenance), "colours": COLOURS,
            "tasks": [task_data(task, n_boot, seed) for task in tasks]}


def render_html(data: dict) -> str:
    """The template with `data` inlined as JSON ("</" and "<!--" escaped inside its strings, so no text of a branch
    can end the script element)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return TEMPLATE.read_text(encoding="utf-8").replace(
        PLACEHOLDER, text.replace("</", "<\\/").replace("<!--", "<\\u0021--"))
