"""Why vLLM's engine did not start, in one line: its root cause and the fix.

vLLM's engine runs in processes of its own, which log the real error (their traceback) to the stdout and stderr they
inherit; the exception that reaches lm-eval says only "Engine core initialization failed. See root cause above",
200 lines below it. `OutputTail` passes this process's stdout and stderr (file descriptors 1 and 2, which the
engine's processes inherit) through pipes while the engine starts: every byte is forwarded at once, the last lines are
kept, and `start_error` reads the root cause from them.
"""

from __future__ import annotations

import collections
import os
import re
import sys
import threading

from .memory_plan import MemoryPlan
from ..model_args import LoverUsageError

#: lines of the engine's output kept for the root cause
KEPT_LINES = 400
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
#: an exception's last traceback line, anywhere in a line (vLLM prefixes its processes' lines with their name)
_ERROR = re.compile(r"(?:^|[\s)\]])((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)): (.+)$")
#: vLLM's CPU worker's report of the KV room it found ("Auto set (0.28/10.84) GiB for KV cache ...")
_KV_REPORT = re.compile(r"((?:Auto|Explicitly) set \(.*?GiB for KV cache.*)$")


class OutputTail:
    """Within `with`, file descriptors 1 and 2 go through pipes whose lines are forwarded and the last `keep` kept.
    The engine's processes keep the pipes after the block (their later lines are still forwarded, by daemon threads
    that end when the last of those processes does); this process writes straight to its streams again."""

    def __init__(self, keep: int = KEPT_LINES):
        self.kept: collections.deque[str] = collections.deque(maxlen=keep)
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.saved: list[tuple[int, int]] = []

    def __enter__(self) -> OutputTail:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd in (1, 2):
            original, (read, write) = os.dup(fd), os.pipe()
            os.dup2(write, fd)
            os.close(write)
            self.saved.append((fd, original))
            thread = threading.Thread(target=self._forward, args=(read, original), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def __exit__(self, *exc) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd, original in self.saved:
            os.dup2(original, fd)

    def _forward(self, read: int, original: int) -> None:
        partial = b""
        while chunk := os.read(read, 65536):
            written = 0
            while written < len(chunk):
                written += os.write(original, chunk[written:])
            *lines, partial = (partial + chunk).split(b"\n")
            with self.lock:
                self.kept.extend(line.decode(errors="replace") for line in lines)
        os.close(read)
        os.close(original)

    def lines(self, wait: float = 2.0) -> list[str]:
        """The kept lines, once the engine's processes have written their last (up to `wait` seconds: another
        process started meanwhile may hold the pipes open)."""
        for thread in self.threads:
            thread.join(wait / len(self.threads))
        with self.lock:
            return [_COLOUR.sub("", line) for line in self.kept]


def root_cause(lines: list[str]) -> str | None:
    """The engine's own error, from its output: the last exception line that is not the front end's "See root cause
    above", with vLLM's CPU report of its KV room when there is one."""
    errors = [m for m in map(_ERROR.search, lines) if m is not None and "See root cause above" not in m.group(2)]
    reports = [m.group(1) for m in map(_KV_REPORT.search, lines) if m is not None]
    if not errors and not reports:
        return None
    cause = f"{errors[-1].group(1)}: {errors[-1].group(2).strip()}" if errors else ""
    cause = cause.split(" Try increasing")[0].split(" See https://")[0]  # vLLM's own advice: ours follows
    return "; ".join(part[:400] for part in (cause, reports[-1] if reports else "") if part)


def fix_for(cause: str, vllm_args: dict, plan: MemoryPlan | None) -> str:
    """What to change, by the kind of failure the cause names."""
    utilization = vllm_args.get("gpu_memory_utilization")
    length = f"max_model_len={plan.max_model_len}" if plan is not None else "max_model_len"
    if "less than desired" in cause or "Free memory on device" in cause:
        return ("other processes hold memory the engine's share needs (a previous run's engine still alive?): free it, "
                f"or lower gpu_memory_utilization (now {utilization})")
    if "kv cache" in cause.lower() or "cache blocks" in cause:
        need = "" if plan is None else f" ({plan.kv_bytes / 2**30:.2f} GiB of KV for one full-length sequence)"
        return (f"its share leaves the KV cache too little room: raise gpu_memory_utilization (now {utilization}) "
                f"or lower {length}{need}; other processes holding memory shrink the room too")
    if "out of memory" in cause.lower():
        return (f"the weights do not fit the engine's share: raise gpu_memory_utilization (now {utilization}) or "
                "tensor_parallel_size, or lower max_model_len")
    return "--model lover_hf decodes without vLLM"


def start_error(error: Exception, lines: list[str], pretrained, vllm_args: dict,
                plan: MemoryPlan | None) -> LoverUsageError:
    """The engine's failed start as one line: the root cause from its output (else the exception's first line) and
    its fix (the plan's numbers are in the line logged before the start)."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    cause = root_cause(lines) or first[:300]
    return LoverUsageError(f"vLLM could not start {pretrained}: {cause.rstrip('.')}. Fix: "
                           f"{fix_for(cause, vllm_args, plan)}.")
