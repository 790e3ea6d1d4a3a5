"""Samples stock readers read: a lover result is logged as lm-eval logs a repeated request's responses, its texts.

lm-eval logs each sample's `resps` from its instances' responses and its `filtered_resps` from what the filters made
of them, after every filter ran (`evaluate`: `task.apply_filters()`, then the samples). A lover model answers each
request with one `LoverResult`, whose `str` is compact JSON (texts, finish reasons, scores), so a samples file, and
the readers that take `resps[0][0]` or `filtered_resps[0]` as the model's text (lm-eval's W&B logger's samples table,
its trackio logger's traces, `--predict_only` users' scripts), read JSON where they read text.

So once a task's filters ran, `install`'s hook on `ConfigurableTask.apply_filters` rewrites each instance holding a
lover result, for logging only (nothing reads an instance's responses after its filters but the samples):

- `resps` becomes the branches' texts as lm-eval's model returns them (the answer part after `think_end_token`, as
  HFLM returns it), one entry per branch, as a `repeats: N` request's N responses are logged: `LoggedText` strings,
  the first of which carries the result (`result`, in memory: `lover compare` reads it) and its evidence (`evidence`:
  the result's `to_dict()`: every branch whole, finish reasons, scores, where each answer part starts);
- a filtered response that is the result itself (a chain of `take_first` alone: a `process_results` task's own row)
  becomes its plain string, the text the metric scored.

The evidence reaches the samples file as each sample's `lover` field (`EvaluationTracker.save_results_samples`,
wrapped here too), which stock readers do not read and `lover view` does. A `--model hf` run is unchanged: only
instances holding lover results are touched.
"""

from __future__ import annotations

import functools

from lm_eval.api.task import ConfigurableTask
from lm_eval.loggers.evaluation_tracker import EvaluationTracker

from ..core.results import LoverResult

#: the samples file's field holding a lover result's evidence (`LoverResult.to_dict`)
EVIDENCE_KEY = "lover"


class LoggedText(str):
    """A branch's text as a samples reader reads it; the first of a result's carries `result` and `evidence`."""

    result: LoverResult | None = None
    evidence: dict | None = None


def logged_responses(result: LoverResult) -> list[LoggedText]:
    """The result's branches as lm-eval's model returns them (`lm_eval_texts` of a view after thinking), the first
    carrying the result and its evidence."""
    texts = getattr(result, "lm_eval_texts", None) or result.texts
    logged = [LoggedText(text) for text in texts]
    logged[0].result, logged[0].evidence = result, result.to_dict()
    return logged


def evidence_of(sample: dict) -> dict | None:
    """A sample's lover evidence: its `lover` field (a samples file), else its first response's (in memory)."""
    if EVIDENCE_KEY in sample:
        return sample[EVIDENCE_KEY]
    first = (sample.get("resps") or [[None]])[0]
    return getattr(first[0] if first else None, "evidence", None)


def result_of(sample: dict):
    """The in-memory result a sample's responses came from (None once read back from a file)."""
    first = (sample.get("resps") or [[None]])[0]
    return getattr(first[0] if first else None, "result", None)


def rewrite_for_logging(instances) -> None:
    """Each instance holding a lover result: its responses as texts, its filtered results as their strings."""
    for instance in instances:
        if not instance.resps or not isinstance(instance.resps[0], LoverResult):
            continue
        instance.resps = logged_responses(instance.resps[0])
        for name, value in instance.filtered_resps.items():
            if isinstance(value, LoverResult):
                instance.filtered_resps[name] = str.__str__(value)


def install() -> None:
    """Wrap `ConfigurableTask.apply_filters` and `EvaluationTracker.save_results_samples` (idempotent)."""
    apply_filters = ConfigurableTask.apply_filters
    if not getattr(apply_filters, "lover_logs_texts", False):
        @functools.wraps(apply_filters)
        def applied(self, *args, **kwargs):
            out = apply_filters(self, *args, **kwargs)
            rewrite_for_logging(getattr(self, "_instances", None) or ())
            return out

        applied.lover_logs_texts = True
        ConfigurableTask.apply_filters = applied
    save = EvaluationTracker.save_results_samples
    if not getattr(save, "lover_logs_texts", False):
        @functools.wraps(save)
        def saved(self, task_name, samples, *args, **kwargs):
            for sample in samples:
                evidence = evidence_of(sample)
                if evidence is not None:
                    sample[EVIDENCE_KEY] = evidence
            return save(self, task_name, samples, *args, **kwargs)

        saved.lover_logs_texts = True
        EvaluationTracker.save_results_samples = saved
