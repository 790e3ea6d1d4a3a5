"""Final-answer extractors for chain-of-thought outputs.

Each extractor maps a model's generated text to an :class:`Answer` (or ``None`` when the text gives no
usable answer). ``Answer.value`` is normalised so that equivalent answers group together ("18", "18.00"
and "$18" all give "18"); ``text[Answer.start:Answer.end]`` is the answer's own characters in the text,
which callers use to map the answer onto generated tokens (:func:`span_confidence`, CoT-decoding's
confidence of that span).

All extractors follow the same rule: an explicit final-answer marker ("The answer is ...", "Answer: ...",
``\\boxed{...}``, ...) wins, the last one in the text if there are several; only when no marker carries a
well-formed answer do they fall back to the last plausible answer anywhere in the text (all but `math`, whose
instruction asks for a box).

An extractor whose answers have no normal form (`math`, math_answers.py) registers an `Equivalence`; every reader of a
question's answers takes them through `stated_answers`, which gives each its group's representative, and compares
with a gold answer through `matches_gold`. For the others (`EXACT`) both are the plain values and `==`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

import numpy as np

Extractor = Callable[[str], "Answer | None"]
#: name -> extractor; a task's `lover_select` filters and lover_hf's `extract=` name one of these.
EXTRACTORS: dict[str, Extractor] = {}
#: name -> extractor read from an lm-eval task's own filter chain (harness/stock_rows.py), registered for the run that
#: decodes the task: the fit and the selectors group its answers as the task reads them. Apart from EXTRACTORS, which
#: the packaged task YAMLs are generated from and `extract=` chooses among.
TASK_EXTRACTORS: dict[str, Extractor] = {}


@dataclass(frozen=True)
class Equivalence:
    """When two answer values are one answer beyond equal strings: what an extractor whose answers have no normal form
    registers (`math`: `\\frac{1}{2}`, `0.5` and `\\dfrac12` are one answer; math_answers.py). Every other extractor's
    values are already normal forms, compared as strings: `EXACT`."""

    same: Callable[[str, str], bool]
    """Symmetric: two branches' values state one answer (`grouped_values` groups by it)."""
    is_gold: Callable[[str, str], bool]
    """(value, gold): a stated or picked value is the gold answer (`matches_gold`)."""


EXACT = Equivalence(same=operator.eq, is_gold=operator.eq)
#: extractor -> its equivalence, for the extractors registered with one other than EXACT.
EQUIVALENCES: dict[Extractor, Equivalence] = {}


def register_extractor(name: str, equivalence: Equivalence = EXACT) -> Callable[[Extractor], Extractor]:
    """Decorator: make an extractor available as ``extract=name`` (adding one is one decorated function), its answers
    grouped by `equivalence` (EXACT: equal values)."""

    def add(extractor: Extractor) -> Extractor:
        if name in EXTRACTORS:
            raise ValueError(f"answer extractor {name!r} is registered twice")
        EXTRACTORS[name] = extractor
        if equivalence is not EXACT:
            EQUIVALENCES[extractor] = equivalence
        return extractor

    return add


def equivalence_of(extract: Extractor) -> Equivalence:
    """The equivalence `extract` was registered with; EXACT for any other callable (a test's own extractor)."""
    return EQUIVALENCES.get(extract, EXACT)


@dataclass(frozen=True)
class Answer:
    """A normalised answer and the half-open character span ``[start, end)`` it was read from."""

    value: str
    start: int
    end: int
    marked: bool = field(default=True, compare=False)
    """Read after an explicit final-answer marker; False when the extractor fell back to the last plausible answer
    anywhere in the text (an unfinished branch's fallback answer is no statement of an answer)."""


# A number token, used inside every number pattern below. Optional sign (ASCII or Unicode minus) and
# optional "$"/"\$"; the body is a thousands-grouped ("1,000") or plain run of ASCII digits with optional
# decimals. The lookbehind rejects digits glued to identifiers ("eggs_per_4_weeks", "D_1"), to a decimal
# point or to a colon (the "00" of "5:00"); the lookahead rejects digits glued to letters ("3B", "2x":
# algebra, not answers), a colon ("Step 4:", "5:00") or a longer number the body stopped short of.
_NUM = (
    r"(?<![\w.:])(?P<sign>[-\u2212])?(?:\\?\$\s?)?"
    r"(?P<body>[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?)"
    r"(?![\w:]|[.,][0-9])"
)
# Anything a model puts between a marker and its answer: spaces, colons, bold, quotes, math delimiters
# and \boxed{ / \text{ openers ("The answer is: **\(\boxed{18}\)**").
_FILLER = r"""(?:\s|[:*$"'`]|\\[(\[]|\\(?:boxed|text|textbf|mathbf|mathrm)\{)*"""
# The start of a final-answer sentence: "The answer is", "the final answer would be", "Answer:".
_ANSWER_IS = r"(?i:\banswer\s*(?:is|was|would\s+be|will\s+be|:))"
# "The answer is 2 + 3 = 5" states an expression, not an answer: its first number must not be read.
_NOT_EXPR = r"(?!\s*(?:[-+*/^=\u00d7\u00f7]|\\times|\\cdot|\\div)\s*[-\u2212]?[0-9])"

# Explicit markers for numeric answers; the last match across all of them wins.
_NUMBER_MARKERS = (
    re.compile(_ANSWER_IS + _FILLER + _NUM + _NOT_EXPR),
    # \boxed{18}, \boxed{\$18}, \boxed{18\%}, \boxed{18 \text{ dollars}}; must close, so "\boxed{3B}" and a
    # truncated "\boxed{24" are not markers.
    re.compile(r"\\boxed\{\s*" + _NUM + r"\s*(?:\\?%|\\text\{[^{}]*\}|[A-Za-z][A-Za-z ]*)?\s*\}"),
    # GSM8K's own answer format.
    re.compile(r"####\s*" + _NUM),
)
# Fallback: any number token except list labels ("6. To solve...", "  2) Next"): the first alternative
# consumes a label at a line start, so finditer never yields it as a number (its "body" stays unset).
_NUMBER_FALLBACK = re.compile(r"(?m)^[ \t]*[0-9]{1,3}[.)][ \t]|" + _NUM)
# Strict form accepted by normalise_number: one number, optionally signed, with "$" and "%" allowed
# around it and a sentence-final period.
_NUMBER_STRING = re.compile(
    r"\s*(?P<sign>[-+\u2212])?\s*(?:\\?\$)?\s*"
    r"(?P<body>[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"\s*(?:\\?%)?\s*\.?\s*"
)

# After a bare word or letter answer: not glued to another word, and not the first word of a phrase
# ("The answer is A man...", "answer: I think", "the answer is no longer") unless a connective follows.
_WORD_END = r"(?![\w'])(?![ \t]+(?!(?:because|since|as|so)\b)[a-z])"
# Multiple-choice letter after "The answer is": "(C)", "C", "option C", "\boxed{C}". The conditional
# group closes a parenthesis only if one was opened; a bare letter must pass _WORD_END.
_CHOICE_MARKERS = (
    re.compile(
        _ANSWER_IS + _FILLER + r"(?:(?i:option|choice)\s*)?"
        r"(?P<open>\()?(?P<ans>[A-J])(?(open)\)|" + _WORD_END + ")"
    ),
    # A bolded letter on its own: "**C**", "**(C)**", "**C.**".
    re.compile(r"\*\*\(?(?P<ans>[A-J])\)?\.?\*\*"),
    # \boxed{C}, \boxed{(C)}, \boxed{\text{C}}.
    re.compile(r"\\boxed\{\s*(?:\\text(?:bf)?\{)?\s*\(?(?P<ans>[A-J])\)?\s*\}?\s*\}"),
)
# Fallback: a letter in parentheses, not a function argument such as "f(A)".
_CHOICE_FALLBACK = re.compile(r"(?<!\w)\((?P<ans>[A-J])\)")
# Last resort, seen in real SmolLM2 outputs: the reply opens by restating an option, "D. cross section
# of a leaf vein" or "C) Water ...". Only at the very start, so list items later on are not read.
_CHOICE_LEADING = re.compile(r"\A\s*\(?(?P<ans>[A-J])[.)]\s")


def _word_patterns(words: str) -> tuple[tuple[re.Pattern[str], ...], re.Pattern[str]]:
    """Marker patterns and the fallback pattern for a closed set of answer words (case-insensitive)."""
    word = rf"(?P<ans>(?i:{words}))\b"
    markers = (
        re.compile(_ANSWER_IS + _FILLER + word + _WORD_END),
        re.compile(r"\*\*" + word + r"[.!]?\*\*"),  # "**Yes**", "**False.**"
        re.compile(r"\\boxed\{\s*(?:\\text(?:bf)?\{)?\s*" + word + r"\s*\}?\s*\}"),
    )
    # Fallback: the word standing alone before punctuation or a line end ("No, ...", "... so yes."),
    # which skips determiner uses such as "there is no reason".
    fallback = re.compile(r"(?<!\w)" + word + r"(?=[ \t]*(?:[.,;:!?)*\"'\]\n]|$))")
    return markers, fallback


# Yes/no questions (HotpotQA, BBH navigate / causal judgement / web of lies).
_YES_NO_MARKERS, _YES_NO_FALLBACK = _word_patterns("yes|no")
# BBH boolean expressions.
_TRUE_FALSE_MARKERS, _TRUE_FALSE_FALLBACK = _word_patterns("true|false")


def normalise_number(s: str) -> str | None:
    """Canonical decimal string for a number written as a string, or ``None`` if it is not one number.

    Accepts a sign, "$"/"\\$", thousands commas ("1,000" but not "1,8"), a trailing "%" or period, and
    surrounding spaces. Integral values lose their decimals ("18.00" -> "18"), others their trailing
    zeros ("0.50" -> "0.5"); "-0" becomes "0". Exact (``Decimal``), so large values do not round.
    """
    m = _NUMBER_STRING.fullmatch(s)
    if m is None:
        return None
    try:
        d = Decimal(m["body"].replace(",", ""))
    except InvalidOperation:
        return None
    if m["sign"] in ("-", "\u2212"):
        d = -d
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


def _last(patterns: Iterable[re.Pattern[str]], text: str, group: str) -> re.Match[str] | None:
    """The match, over all ``patterns``, whose ``group`` ends last in ``text``."""
    best = None
    for pattern in patterns:
        for m in pattern.finditer(text):
            if best is None or m.end(group) > best.end(group):
                best = m
    return best


def _number_answer(m: re.Match[str], marked: bool = True) -> Answer | None:
    """Answer for a match of a pattern built on ``_NUM``; the span includes the sign but not "$"."""
    value = normalise_number((m["sign"] or "") + m["body"])
    if value is None:
        return None
    start = m.start("sign") if m["sign"] else m.start("body")
    return Answer(value, start, m.end("body"), marked)


@register_extractor("number")
def extract_number(text: str) -> Answer | None:
    """Numeric answer (GSM8K, iGSM, BBH object counting / multistep arithmetic).

    The last explicit marker ("The answer is N", "Answer: N", ``\\boxed{N}``, "#### N") holding a number
    wins; a marker followed by something else ("The answer is N." copied from the prompt, "The answer is
    the profit") is ignored. Otherwise the last number in the text is taken, skipping list labels
    ("6. ..."), step labels and clock times ("Step 4:", "5:00") and digits inside identifiers or algebra.
    """
    m = _last(_NUMBER_MARKERS, text, "body")
    if m is not None:
        return _number_answer(m)
    numbers = [n for n in _NUMBER_FALLBACK.finditer(text) if n["body"] is not None]
    return _number_answer(numbers[-1], marked=False) if numbers else None


@register_extractor("choice")
def extract_choice(text: str) -> Answer | None:
    """Multiple-choice letter A-J (MMLU-Pro); value is the upper-case letter.

    Markers: "The answer is (C)", "answer is C", "Answer: C", "**C**", ``\\boxed{C}``; the last wins.
    Fallback: the last letter in parentheses, "(C)"; then a reply that opens with an option, "D. text".
    Capitals that start words ("A man", "I think") are never read as answers.
    """
    m = _last(_CHOICE_MARKERS, text, "ans")
    if m is not None:
        return Answer(m["ans"], m.start("ans"), m.end("ans"))
    m = _last((_CHOICE_FALLBACK,), text, "ans") or _CHOICE_LEADING.match(text)
    return None if m is None else Answer(m["ans"], m.start("ans"), m.end("ans"), marked=False)


def _extract_word(
    text: str, markers: tuple[re.Pattern[str], ...], fallback: re.Pattern[str], canon: Callable[[str], str]
) -> Answer | None:
    """Shared body of the closed-vocabulary extractors: last marker, else last standalone word."""
    m = _last(markers, text, "ans")
    if m is not None:
        return Answer(canon(m["ans"]), m.start("ans"), m.end("ans"))
    m = _last((fallback,), text, "ans")
    return None if m is None else Answer(canon(m["ans"]), m.start("ans"), m.end("ans"), marked=False)


@register_extractor("yes_no")
def extract_yes_no(text: str) -> Answer | None:
    """"yes" or "no" (lower-case), from "The answer is Yes" or else the last standalone yes/no word."""
    return _extract_word(text, _YES_NO_MARKERS, _YES_NO_FALLBACK, str.lower)


@register_extractor("true_false")
def extract_true_false(text: str) -> Answer | None:
    """"True" or "False", from "The answer is False" or else the last standalone true/false word."""
    return _extract_word(text, _TRUE_FALSE_MARKERS, _TRUE_FALSE_FALLBACK, str.capitalize)


def stated_answer(extract: Extractor, branch) -> Answer | None:
    """The answer a branch states, the one rule the fit, selection and diagnostics read: the extractor's, except that
    a branch cut at the token budget (`finish_reason == "length"`) whose answer came from the fallback states none.

    An unfinished branch's last number or word is where the budget stopped it, not its answer ("...at the farmers'
    market daily for $2 per fresh duck" -> 2). Pre-registered and measured on every banked set
    (benchmarks/runs/run19_cut_branches_selectors.md): +0.050 [+0.023, +0.080] for majority voting on GSM8K at 1.5B,
    within +-0.006 of no change pooled at 0.5B. A cut branch that stated a marked answer before the budget keeps it;
    a plain string (no finish reason) is read as the extractor reads it."""
    answer = extract(branch.text)
    if answer is not None and not answer.marked and getattr(branch, "finish_reason", None) == "length":
        return None
    return answer


def stated_answers(extract: Extractor, branches) -> list[Answer | None]:
    """Each branch's `stated_answer`, its value replaced by its answer group's representative among the question's
    branches (`grouped_values`): what every reader of a question's answers takes (the fit's groups, the selectors,
    `lover compare`, `lover view`), so they all group alike. With an EXACT extractor, the stated answers as they are."""
    answers = [stated_answer(extract, b) for b in branches]
    equivalence = equivalence_of(extract)
    if equivalence is EXACT:
        return answers
    values = grouped_values([None if a is None else a.value for a in answers], equivalence)
    return [a if a is None or a.value == value else dataclasses.replace(a, value=value)
            for a, value in zip(answers, values)]


def grouped_values(values: list[str | None], equivalence: Equivalence = EXACT) -> list[str | None]:
    """The one per-question grouping step: each value replaced by its answer group's representative (None stays None).

    EXACT: the values themselves (equal strings are one answer). Otherwise the groups are the connected components of
    `equivalence.same` over the question's distinct values: a ~ b and b ~ c put all three in one group even where a !~ c
    (math-verify's equivalence is not transitive: "x = 2" ~ "2" ~ "y = 2", but "x = 2" !~ "y = 2"), rather than letting
    the order the branches came in decide which of a and c joins b. A component depends on the set of distinct values
    alone, so the groups are the same whatever the order of the branches; its representative, the value every member
    takes, is its shortest value, then the first in code-point order (`{"\\frac{1}{2}", "0.5", "\\dfrac12"}` -> "0.5").
    Cost: one `same` call per pair of distinct values not already joined, at most d (d - 1) / 2 for d distinct
    values."""
    if equivalence is EXACT:
        return list(values)
    distinct = tuple(sorted({v for v in values if v is not None}, key=_canonical))
    representative = dict(zip(distinct, _representatives(distinct, equivalence)))
    return [None if v is None else representative[v] for v in values]


def _canonical(value: str) -> tuple[int, str]:
    return len(value), value


@functools.lru_cache(maxsize=1 << 14)
def _representatives(distinct: tuple[str, ...], equivalence: Equivalence) -> tuple[str, ...]:
    """Per value of `distinct` (sorted by `_canonical`), its component's representative: union-find over the pairs."""
    root = list(range(len(distinct)))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    for i, j in itertools.combinations(range(len(distinct)), 2):
        a, b = find(i), find(j)
        if a != b and equivalence.same(distinct[i], distinct[j]):
            root[max(a, b)] = min(a, b)  # the lower index is the shorter value, then the first in code-point order
    return tuple(distinct[find(i)] for i in range(len(distinct)))


def matches_gold(extract: Extractor, value: str | None, gold: str | None) -> bool:
    """Whether a stated or picked answer value is the gold answer, as every reader of a gold answer decides it
    (`lover_match`, `pass_at_n`, `lover compare`'s rows and diagnostics, the sampling references): equal strings, or
    the extractor's `Equivalence.is_gold` (EXACT: equal strings only)."""
    if value is None or gold is None:
        return False
    return value == gold or equivalence_of(extract).is_gold(value, gold)


def span_confidence(margins: list[float], offsets: list[tuple[int, int]], answer: Answer | None) -> float:
    """CoT-decoding Delta: mean margin over the tokens overlapping the answer's character span (0 without an answer)."""
    if answer is None:
        return 0.0
    inside = [m for m, (s, e) in zip(margins, offsets) if s < answer.end and e > answer.start]
    return float(np.mean(inside)) if inside else 0.0


def get_extractor(name: str) -> Callable[[str], Answer | None]:
    """The extractor registered as ``name``; ValueError naming the allowed ones otherwise."""
    try:
        return EXTRACTORS[name] if name in EXTRACTORS else TASK_EXTRACTORS[name]
    except KeyError:
        raise ValueError(f"extract={name!r} is not a known answer extractor; choose one of {sorted(EXTRACTORS)}") from None


def answer_groups(values: list[str | None]) -> list[int]:
    """The one grouping rule, used by the fit and by selection: a group id per branch.

    Branches with equal answer values share an id, numbered in order of first appearance. Branches without an
    answer (None: the extractor found none) form one group of their own, numbered like any other: the fit's
    inter-group constraint treats "no answer" as one more candidate that may be the true one (as the authors'
    code does), while selection never outputs it, since it has no answer to output (:func:`answer_members`).
    """
    ids: dict[str | None, int] = {}
    return [ids.setdefault(value, len(ids)) for value in values]


def n_answer_groups(values: list[str | None]) -> int:
    """How many groups :func:`answer_groups` forms: the distinct answers, "no answer" counting as one."""
    return len(set(values))


def answer_members(values: list[str | None]) -> dict[str, list[int]]:
    """Answer value -> indices of its branches, for the groups of :func:`answer_groups` that have an answer,
    in order of first appearance (the candidates selection chooses among)."""
    members: dict[str, list[int]] = {}
    for index, value in enumerate(values):
        if value is not None:
            members.setdefault(value, []).append(index)
    return members
