"""lm-eval's generation settings (`--gen_kwargs`, a task's `generation_kwargs`) mapped onto lover_hf's decoding.

lover_hf decodes N branches itself, so a request's kwargs cannot go to `generate` as HFLM passes them. Each one is
either honoured or refused before any decoding, never dropped:

- `until`, `max_gen_toks` (and its aliases): the stop strings and the token budget, as HFLM reads them.
- `do_sample=true` (or a temperature > 0 with no `do_sample`, lm-eval's own rule): `decoding=sample` with the
  request's `temperature` / `top_p`. model_args that say otherwise are a conflict, refused with both names: an explicit
  `decoding=cot|beam`, or a `temperature` / `top_p` that differs from the request's.
- `do_sample=false` (every lover task's default): the decoding model_args choose (CoT-decoding by default); a
  `top_p` then means nothing and is refused.
- anything else (`top_k`, `num_beams`, `repetition_penalty`, ...): refused by name.
"""

from __future__ import annotations

from dataclasses import replace

from lm_eval.models.utils import normalize_gen_kwargs

from ..core.decode.decoding import BRANCH_ZERO, DecodingConfig
from ..log import log
from .model_args import LoverUsageError

#: request kwargs lover_hf honours (lm-eval's normalisation folds max_new_tokens & co. into max_gen_toks)
HONOURED = {"until", "max_gen_toks", "do_sample", "temperature", "top_p"}


class GenerationSettingError(LoverUsageError):
    """A generation setting lover_hf cannot honour, or one that contradicts model_args."""


def greedy_row_note(decoding: DecodingConfig) -> str | None:
    """The warning a run logs when its `greedy` row is not a greedy decode's score; None for decoding=cot."""
    if decoding.mode == "cot":
        return None
    return (f"decoding={decoding.mode}: the greedy row scores branch 0, {BRANCH_ZERO[decoding.mode]}, not a greedy "
            f"decode; for a greedy baseline run decoding=cot (its branch 0 is {BRANCH_ZERO['cot']}) or lm-eval's "
            "--model hf")


def warn_once_if_greedy_row_is_drawn(decoding: DecodingConfig, logged: set[str]) -> None:
    """Log `greedy_row_note` unless `logged` (the run's notes so far) has it: once a run, not once a batch."""
    note = greedy_row_note(decoding)
    if note is not None and note not in logged:
        logged.add(note)
        log.warning(note)


def resolve_decoding(base: DecodingConfig, explicit: set[str], gen_kwargs: dict, max_gen_toks: int
                     ) -> tuple[DecodingConfig, dict]:
    """The decoding a request's kwargs ask for, and the kwargs normalised as lm-eval does (`until`, `max_gen_toks`).

    `base` is the model_args' decoding; `explicit` the decoding model_args the user set (`decoding`, `temperature`,
    `top_p`), which a request may not contradict."""
    kwargs = dict(normalize_gen_kwargs(dict(gen_kwargs), max_gen_toks))
    unknown = sorted(set(kwargs) - HONOURED)
    if unknown:
        shown = ", ".join(f"{k}={kwargs[k]!r}" for k in unknown)
        raise GenerationSettingError(
            f"gen_kwargs {shown}: lover_hf decodes its N branches itself and has no such setting; remove it. It "
            "honours until, max_gen_toks, do_sample, temperature and top_p (model_args decoding=cot|sample|beam, "
            "n_branches, temperature, top_p choose the rest).")
    if not kwargs.pop("do_sample"):
        if "top_p" in kwargs:
            raise GenerationSettingError(
                f"gen_kwargs top_p={kwargs['top_p']} without do_sample=true changes nothing; add do_sample=true "
                "(sampled branches) or drop top_p.")
        kwargs.pop("temperature", None)  # lm-eval sets 0.0 for greedy requests
        return base, kwargs
    if "decoding" in explicit and base.mode != "sample":
        raise GenerationSettingError(
            f"gen_kwargs do_sample=true asks for sampled branches, but model_args decoding={base.mode}; drop one of "
            "them (or pass decoding=sample).")
    settings = {}
    for name in ("temperature", "top_p"):
        if name not in kwargs:
            continue
        value = float(kwargs.pop(name))
        if name in explicit and value != getattr(base, name):
            raise GenerationSettingError(
                f"gen_kwargs {name}={value:g} contradicts model_args {name}={getattr(base, name):g}; set it in one "
                "place.")
        settings[name] = value
    if settings.get("temperature", base.temperature) <= 0:
        raise GenerationSettingError("gen_kwargs do_sample=true with temperature=0 samples nothing; pass a "
                                     "temperature > 0 (e.g. temperature=0.7) or do_sample=false.")
    return replace(base, mode="sample", **settings), kwargs


def check_requests(requests, base: DecodingConfig, explicit: set[str], max_gen_toks: int) -> None:
    """Before any decoding (a refusal after hours of branches helps no one): every distinct generation-kwargs group
    can be honoured, and no prompt is empty (it would fail inside the prefill, after other questions decoded)."""
    for kwargs in {repr(sorted(r.args[1].items())): r.args[1] for r in requests}.values():
        resolve_decoding(base, explicit, kwargs, max_gen_toks)
    for request in requests:
        if not request.args[0].strip():
            raise LoverUsageError(
                f"task {getattr(request, 'task_name', None) or '?'} doc {getattr(request, 'doc_id', '?')} has an empty "
                "prompt: there is no question to decode branches for; check the task's doc_to_text.")
