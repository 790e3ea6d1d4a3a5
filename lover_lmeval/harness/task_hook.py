"""Which lm-eval task objects a `generate_until` call serves, found from its requests.

lm-eval hands a model its requests, not the tasks; a request carries only its task's name. What the adapter checks
and adds before decoding (each `lover_select` filter's arguments, the selector rows on a stock task, how its answers
are grouped) needs the task objects, and lm-eval builds a task's filters only as `partial`s it calls after every
request ran. So every task records itself when lm-eval builds its requests (`ConfigurableTask.build_all_requests`,
which `evaluate` calls for each task before any model call), and `tasks_of(requests)` maps the requests back to the
task objects holding them. The hook is installed once, when a lover model's module is imported; it only records,
so a `--model hf` run in the same process is unchanged.
"""

from __future__ import annotations

import functools
import weakref

from lm_eval.api.task import ConfigurableTask

#: task name -> the task object that last built its requests (weak: a finished run's tasks are freed as before)
_BUILT: dict[str, weakref.ref] = {}


def install() -> None:
    """Wrap `ConfigurableTask.build_all_requests` to record each task it builds (idempotent)."""
    original = ConfigurableTask.build_all_requests
    if getattr(original, "lover_records_task", False):
        return

    @functools.wraps(original)
    def build_all_requests(self, *args, **kwargs):
        built = original(self, *args, **kwargs)
        _BUILT[self.config.task] = weakref.ref(self)
        return built

    build_all_requests.lover_records_task = True
    ConfigurableTask.build_all_requests = build_all_requests


def tasks_of(requests) -> list:
    """The task objects whose requests these are, in the requests' order of first appearance; a name whose recorded
    task does not hold the request (built by another run) or was never recorded (a caller outside `evaluate`) is
    skipped."""
    first: dict[str, object] = {}
    for request in requests:
        first.setdefault(getattr(request, "task_name", None) or "", request)
    found = []
    for name, request in first.items():
        task = _BUILT[name]() if name in _BUILT else None
        if task is not None and any(instance is request for instance in getattr(task, "_instances", None) or ()):
            found.append(task)
    return found
