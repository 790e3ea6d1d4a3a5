"""math-verify's parse and equivalence of LaTeX answers, each call bounded in time, in any thread of any process.

math-verify (LaTeX and plain-text answers parsed to SymPy and compared) bounds its own calls with `signal.alarm`,
which works only in a process's main thread (elsewhere it raises ValueError), cancels any alarm its caller had set,
and cannot stop a computation running inside C (a huge integer power) until it returns. So the calls run in a child
process (math_worker.py), started on first use, and the caller waits at most `TIMEOUT_S` for each reply: past it the
child is killed, whatever it was computing, the call counts as failed (not parsable, not equal) and the next call
starts a fresh child. The same holds in lm-eval's main thread, in lover_vllm's process and in any other thread; a lock
lets one call at a time through to the child (a thread waits for the calls ahead of its own).

Every answer reaches the child once a process: replies are cached by value (`parsable`) and by unordered pair
(`same`), so the selection rows of one task share one comparison per pair of answers, and a timed-out pair is not
retried.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

from ...log import log

#: Seconds one parse or comparison may take (math-verify's own default, 5 s); past it the call counts as failed.
TIMEOUT_S = 5.0
#: Seconds the child may take to import math-verify (SymPy and the LaTeX parser: about a second, more on a busy CPU).
START_TIMEOUT_S = 120.0
WORKER = Path(__file__).with_name("math_worker.py")
#: The child's command: the worker run by its path, which imports none of this package (no torch).
COMMAND = (sys.executable, "-c", f"import runpy; runpy.run_path({str(WORKER)!r}, run_name='__main__')")


class MathWorker:
    """One child process answering math-verify requests, each reply awaited at most `timeout_s`."""

    def __init__(self, command: tuple[str, ...] = COMMAND, timeout_s: float | None = None,
                 start_timeout_s: float = START_TIMEOUT_S):
        self.command, self.start_timeout_s = command, start_timeout_s
        self._timeout_s = timeout_s
        self.lock = threading.Lock()
        self.process: subprocess.Popen | None = None
        self.owner = 0  # the pid that started the child: a forked copy of this object must start its own
        self.buffer = b""
        self.timeouts = 0

    @property
    def timeout_s(self) -> float:
        return TIMEOUT_S if self._timeout_s is None else self._timeout_s

    @timeout_s.setter
    def timeout_s(self, seconds: float | None) -> None:
        self._timeout_s = seconds

    def call(self, *request: str) -> bool:
        """The child's reply to `request` (math_worker.py), False when none came within `timeout_s`."""
        with self.lock:
            process = self._running()
            process.stdin.write((json.dumps(request) + "\n").encode())
            process.stdin.flush()
            reply = self._line(time.monotonic() + self.timeout_s)
            if reply is None:
                self.timeouts += 1
                log.warning("math-verify took over %.0f s on %s: counted as %s (its process killed and restarted)",
                            self.timeout_s, " vs ".join(repr(value[:80]) for value in request[1:]),
                            "no answer" if request[0] == "parse" else "different answers")
                self._stop()
                return False
            return bool(json.loads(reply))

    def close(self) -> None:
        with self.lock:
            self._stop()

    def _running(self) -> subprocess.Popen:
        if self.process is not None and (self.owner != os.getpid() or self.process.poll() is not None):
            self.process = None  # forked from the process that started it, or the child died: start another
        if self.process is None:
            if self.command == COMMAND and importlib.util.find_spec("math_verify") is None:
                raise RuntimeError("extract=math needs math-verify: pip install 'math-verify>=0.8' (the README's setup "
                                   "installs it with this package)")
            self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL)
            self.owner, self.buffer = os.getpid(), b""
            if self._line(time.monotonic() + self.start_timeout_s) != "ready":
                self._stop()
                raise RuntimeError(f"math-verify's worker process ({WORKER}) did not start within "
                                   f"{self.start_timeout_s:.0f} s; check that "
                                   f"`{sys.executable} -c 'import math_verify'` works")
        return self.process

    def _line(self, deadline: float) -> str | None:
        """The child's next line of output, or None when it has not written one by `deadline` (or has exited)."""
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def _stop(self) -> None:
        if self.process is not None and self.owner == os.getpid():
            self.process.kill()
            self.process.wait()
        self.process = None


WORKER_PROCESS = MathWorker()
atexit.register(WORKER_PROCESS.close)


@functools.lru_cache(maxsize=1 << 16)
def parsable(value: str) -> bool:
    """Whether math-verify reads a mathematical object from `value` (a LaTeX answer); False past the time bound."""
    return WORKER_PROCESS.call("parse", value)


def same(a: str, b: str) -> bool:
    """Whether two answers are one by math-verify, in either direction (symmetric: the pair is cached unordered)."""
    return a == b or _same(*sorted((a, b)))


@functools.lru_cache(maxsize=1 << 16)
def _same(a: str, b: str) -> bool:
    return WORKER_PROCESS.call("same", a, b)


@functools.lru_cache(maxsize=1 << 16)
def is_gold(value: str, gold: str) -> bool:
    """Whether `value` is the gold answer by math-verify, `verify(gold, value)`; False past the time bound."""
    return WORKER_PROCESS.call("is_gold", value, gold)
