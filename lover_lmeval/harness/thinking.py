"""lm-eval's `think_end_token` for lover's results: a reasoning model's answer is read after its end of thinking.

HFLM and lm-eval's VLLM return only the text after the last end-of-thinking marker (a string, or a token id: HFLM
reads a string of digits as one), left-stripped; a text without the marker is returned whole (lm-eval's
`postprocess_generated_text`). lover does the same for what reads answers: each branch of a result is viewed from
its answer part on (`after_thinking`), so the stock filters (branch 0's text), lover_select's extractors, the
selectors' answer spans and the test-time fit's answer groups all read the answer after the thinking.

A branch cut at the token budget before any end of thinking (`unfinished`: no marker, finish reason "length") has no
answer part: whatever its reasoning last said is not its answer (lm-eval #3382 reports the same for one generation).
Its view is empty, so it states no answer to every selector row, the sampling references and the fit; the result's
own string (what the task's own rows read, branch 0) and a repeated request's copies stay what lm-eval's HFLM
returns, the whole text. A branch that stopped without a marker (a model that did not think) is read whole, as HFLM
reads it. The run logs how many branches were cut in their thinking. The bank and
the samples keep every branch whole: the bank is written before the view is taken, and an `AnswerView` logs its full
texts with the character each answer part starts at. LoVer's features are still read over the whole branch (the
pipeline's teacher-forced pass and its templates follow the full solution), which lover_hf says once a run.
"""

from __future__ import annotations

from dataclasses import replace

from ..core.decode.branch import Branch
from ..core.results import LoverResult


def think_marker(value) -> str | int | None:
    """A think_end_token as lm-eval's HFLM takes it: None, a token id (an int, or a string of digits), or a string."""
    if value in (None, ""):
        return None
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return int(value)
    return str(value)


def answer_start(branch: Branch, marker: str | int) -> int | None:
    """Where `branch.text`'s answer part starts: after the last `marker` (a string in the text, or a token id among
    the branch's tokens), past the whitespace that follows it; None when the branch has no such marker."""
    text = branch.text
    if isinstance(marker, int):
        found = [k for k, token in enumerate(branch.token_ids) if token == marker and k < len(branch.offsets)]
        if not found:
            return None
        end = branch.offsets[found[-1]][1]
    else:
        at = text.rfind(marker)
        if at < 0:
            return None
        end = at + len(marker)
    return end + (len(text[end:]) - len(text[end:].lstrip()))


def unfinished(branch: Branch, marker: str | int) -> bool:
    """Whether the branch was cut at the budget before its thinking ended (no marker, finish reason "length")."""
    return branch.finish_reason == "length" and answer_start(branch, marker) is None


def after_thinking(branch: Branch, marker: str | int) -> tuple[Branch, int]:
    """(the branch viewed from its answer part on, where that part starts in its text). The tokens, margins and
    statistics stay whole; each token's character span moves with the text (a token of the thinking spans nothing),
    so CoT-decoding's confidence still averages the margins of the answer's own tokens."""
    start = answer_start(branch, marker)
    if not start:
        return branch, 0
    offsets = [(max(s - start, 0), max(e - start, 0)) for s, e in branch.offsets]
    return replace(branch, text=branch.text[start:], offsets=offsets), start


class AnswerView(LoverResult):
    """A result whose branches are read from their answer part on (its `str` is branch 0's answer part, as HFLM
    returns it), logged in the samples with the full texts and where each answer part starts."""

    full_texts: list[str]
    answer_starts: list[int]
    lm_eval_texts: list[str]
    """What lm-eval's HFLM returns for each branch: its answer part, or the whole text where it has none."""

    def copy_for(self, j: int) -> "LoverResult":
        """Copy j of a repeated request, whose string is what HFLM returns for branch j (`LoverResult.copy_for`)."""
        return _with_string(self, self.lm_eval_texts[j], j)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "texts": self.full_texts, "answer_starts": self.answer_starts}


def _with_string(view: AnswerView, text: str, copy: int = 0) -> AnswerView:
    """The view with another string value (what a task's own rows read), every attribute shared."""
    if str.__str__(view) == text and copy == 0:
        return view
    other = str.__new__(AnswerView, text)
    other.__dict__.update(view.__dict__)
    if copy:
        other.copy_index = copy
    return other


def view_after_thinking(result: LoverResult, marker: str | int | None) -> LoverResult:
    """`result` read after each branch's end of thinking (itself when there is no marker to look for); a branch cut
    in its thinking (`unfinished`) viewed as empty."""
    if marker is None:
        return result
    cut = [unfinished(b, marker) for b in result.branches]
    viewed = [(replace(b, text="", offsets=[(0, 0)] * len(b.offsets)), len(b.text)) if is_cut
              else after_thinking(b, marker) for b, is_cut in zip(result.branches, cut)]
    view = AnswerView([b for b, _ in viewed], result.stored_features, result.verifier_probs, result.layer,
                      result.prompt_ids, result.stored_layer_features, result.fit_extract, result.scored_by)
    view.full_texts, view.answer_starts = result.texts, [start for _, start in viewed]
    view.lm_eval_texts = [whole if is_cut else b.text for (b, _), whole, is_cut in zip(viewed, result.texts, cut)]
    view.cut_in_thinking = sum(cut)
    return _with_string(view, view.lm_eval_texts[0])
