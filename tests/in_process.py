"""Commands run in the test's own process: `lm_eval` through lm-eval's command-line entry point (`cli_evaluate`) and
`lover` through its `main`, with what they print and log captured.

A subprocess pays 15-20 s of imports and lm-eval's task index before any work; in this process both are paid once a
session (conftest's `lm_eval_builtin_index_once`). A test whose subject is the process itself (a kill, Ctrl-C, the
one-line error of the real command, torchrun's ranks, the wheel) keeps the real command; a test of what a run
computes, records or logs runs it here, with the same arguments a user types.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path


@contextlib.contextmanager
def builtin_index_once():
    """lm-eval indexes its ~14k built-in task YAMLs in every `TaskManager` (~10 s on a 2-core CPU). The built-in
    folder cannot change during a run, so within this context its index is built once and reused; every other folder
    (our tasks, a test's own) is indexed afresh as lm-eval does, later folders overriding earlier. The factory
    deep-copies an entry's config before building a task from it, so a shared index is never mutated."""
    try:
        from lm_eval.tasks import _index
    except ImportError:  # an lm-eval without this index (older releases): nothing to reuse
        yield
        return
    original = _index.TaskIndex.build
    builtin = Path(_index.__file__).resolve().parent
    cached: dict = {}

    def build(paths, *, resolve_includes=True):
        index = {}
        for root in paths:
            if Path(root).resolve() == builtin:
                if resolve_includes not in cached:
                    cached[resolve_includes] = original([root], resolve_includes=resolve_includes)
                index.update(cached[resolve_includes])
            else:
                index.update(original([root], resolve_includes=resolve_includes))
        return index

    _index.TaskIndex.build = staticmethod(build)
    try:
        yield
    finally:
        _index.TaskIndex.build = staticmethod(original)


@dataclass
class Done:
    """What a command run in this process printed (stdout) and logged (lm-eval's and lover's loggers, one record a
    line as the real command's stderr shows them, plus anything written to stderr)."""

    stdout: str
    stderr: str


class _Lines(logging.Handler):
    def __init__(self, into: io.StringIO):
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.write(f"{record.levelname} [{record.name}] {record.getMessage()}\n")


@contextlib.contextmanager
def _captured(cwd: Path, argv0: str, args: list[str]):
    """argv, the working directory and both streams swapped for the call, lm-eval's and lover's loggers captured
    (lm-eval's own `setup_logging` stops `lm_eval` from propagating, so a root handler would miss its records); all of
    it restored afterwards, and the run's model freed before the next test loads its own."""
    out, err = io.StringIO(), io.StringIO()
    handler = _Lines(err)
    loggers = [logging.getLogger(name) for name in ("lm_eval", "lover_lmeval")]
    saved = [(logger.level, logger.propagate) for logger in loggers]
    argv, here = sys.argv, Path.cwd()
    for logger in loggers:
        logger.addHandler(handler)
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)  # what the real command shows (lm-eval's default verbosity)
    sys.argv = [argv0, *args]
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        sys.argv = argv
        os.chdir(here)
        for logger, (level, propagate) in zip(loggers, saved):
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
        gc.collect()


def lm_eval(args: list[str], cwd: Path) -> Done:
    """`lm_eval ARGS` run from `cwd` in this process; an error propagates as the exception the command raised.
    argv[0] is not `lm_eval`, so lover's one-line excepthook for the real command stays out of this process."""
    from lm_eval.__main__ import cli_evaluate
    from lm_eval.utils import setup_logging

    setup_logging()  # once a process, outside the capture: its handler must not keep this call's stderr
    with _captured(cwd, "in-process", args) as (out, err):
        cli_evaluate()
    return Done(out.getvalue(), err.getvalue())


def lover(args: list[str], cwd: Path) -> Done:
    """`lover ARGS` run from `cwd` in this process; a nonzero status raises SystemExit as the command exits."""
    from lover_lmeval.apps.cli import main

    with _captured(cwd, "lover", args) as (out, err):
        status = main(list(args))
    if status:
        raise SystemExit(f"lover {' '.join(args)} exited {status}:\n{err.getvalue()[-3000:]}")
    return Done(out.getvalue(), err.getvalue())


@contextlib.contextmanager
def logged(name: str, level: int = logging.INFO):
    """The messages logger `name` emits in the block, at `level` and above, read by a handler on that logger itself:
    lm-eval's `setup_logging` stops `lm_eval` from propagating, so pytest's caplog (a root handler) sees its records
    or not depending on which test ran first in the worker."""
    messages: list[str] = []
    handler, logger = logging.Handler(level), logging.getLogger(name)
    handler.emit = lambda record: messages.append(record.getMessage())
    saved = logger.level
    if logger.level == logging.NOTSET or logger.level > level:
        logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
