"""`extract=math`: LaTeX final answers (MATH-500, AIME, minerva_math), grouped by mathematical equivalence.

A math answer has no normal form a string could hold: `\\frac{1}{2}`, `0.5` and `\\dfrac12` are one answer, and so are
`3\\sqrt{13}` and `\\sqrt{117}`, or `90^\\circ` and `90`. So the extractor's value is the answer as written (spaces
collapsed), and answers are grouped per question by math-verify's equivalence (`MATH`, an `answers.Equivalence`;
`answers.grouped_values` says how the groups are formed); a pick is scored against the gold answer by the same
library (`answers.matches_gold`, what `lover_match` with `extract: math` runs). math-verify runs in a child process,
each call bounded in time (math_equivalence.py).

Where the answer is read, as the instruction asks for it: the content of the last `\\boxed{...}` (or `\\fbox{...}`)
that closes; without one, the last answer sentence ("The answer is $\\frac{14}{3}$.", "Final Answer: The final
answer is $24$."), its math delimiters dropped, a plain-text answer cut before the first word of prose ("5 apples" ->
"5"). An answer math-verify cannot parse (`\\boxed{}`, `\\frac{1}{`, "I don't know") is no answer, as the other
extractors' unreadable answers are. Every answer is marked: there is no fallback to the last number of the text.
"""

from __future__ import annotations

import re

from . import math_equivalence
from .answers import Answer, Equivalence, register_extractor

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
# The start of an answer sentence ("The answer is", "the final answer would be", "Answer:"), the filler after it.
_ANSWER_IS = re.compile(r"(?i:\banswer\s*(?:is|was|would\s+be|will\s+be|:))[\s:*]*")
# An answer in math delimiters right after the sentence's start: $...$, \(...\), \[...\].
_DELIMITED = re.compile(r"\$(?P<dollar>[^$]+)\$|\\\((?P<paren>.+?)\\\)|\\\[(?P<bracket>.+?)\\\]", re.S)
# In a plain-text answer, what is LaTeX rather than prose: \text{...}-like groups, environments' names, commands.
_LATEX = re.compile(r"\\(?:text\w*|mathrm|mbox|operatorname|begin|end)\s*\{[^{}]*\}|\\[A-Za-z]+")
# A word of prose: three letters or more that no backslash starts ("5 apples", "therefore 5"; single letters and
# "cm" are math).
_PROSE = re.compile(r"(?<![A-Za-z])[A-Za-z]{3,}")
# Where a plain-text answer's sentence ends: a period before a space or the end, or a line end.
_SENTENCE_END = re.compile(r"\.(?=\s|$)|\n")


def _closing(text: str, start: int) -> int | None:
    """Index of the brace closing the group that opens just before `start` (escaped braces `\\{` skipped), or None."""
    depth, i = 1, start
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        depth += char == "{"
        depth -= char == "}"
        if depth == 0:
            return i
        i += 1
    return None


def _last_boxed(text: str) -> tuple[int, int] | None:
    """The span of the content of the last `\\boxed{...}` that closes (a branch cut inside its box has none)."""
    for opening in reversed(list(_BOXED.finditer(text))):
        end = _closing(text, opening.end())
        if end is not None:
            return opening.end(), end
    return None


def _plain_end(text: str, start: int) -> int:
    """Where a plain-text answer starting at `start` ends: at its sentence's end, or before its first word of prose."""
    stop = _SENTENCE_END.search(text, start)
    end = stop.start() if stop else len(text)
    masked = _LATEX.sub(lambda m: " " * len(m.group()), text[start:end])
    prose = _PROSE.search(masked)
    return start + prose.start() if prose else end


def _last_sentence(text: str) -> tuple[int, int] | None:
    """The span of the answer after the last answer sentence that states one (math delimiters excluded)."""
    for marker in reversed(list(_ANSWER_IS.finditer(text))):
        delimited = _DELIMITED.match(text, marker.end())
        if delimited:
            group = next(name for name in ("dollar", "paren", "bracket") if delimited[name] is not None)
            start, end = delimited.span(group)
        else:
            start, end = marker.end(), _plain_end(text, marker.end())
        while end > start and text[end - 1] in " \t.,;:*":
            end -= 1
        if text[start:end].strip():
            return start, end
    return None


def _answer(text: str, span: tuple[int, int]) -> Answer | None:
    start, end = span
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    value = " ".join(text[start:end].split())
    return Answer(value, start, end) if value and math_equivalence.parsable(value) else None


#: Two branches' answers are one when math-verify verifies either against the other; a pick is right when it verifies
#: against the gold answer in the gold's place.
MATH = Equivalence(same=math_equivalence.same, is_gold=math_equivalence.is_gold)


@register_extractor("math", MATH)
def extract_math(text: str) -> Answer | None:
    """LaTeX answer (MATH-500): the last closed `\\boxed{...}`'s content, else the last answer sentence's answer;
    None when there is neither or math-verify cannot parse it (module docstring)."""
    span = _last_boxed(text) or _last_sentence(text)
    return None if span is None else _answer(text, span)
