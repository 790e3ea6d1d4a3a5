"""The child process behind math_equivalence.py: math-verify on answer strings, one JSON request a line on stdin, one
JSON reply a line on stdout. Run by its path (never imported by the package), so it loads only the standard library
and math-verify, whose import (SymPy, the ANTLR LaTeX parser) then costs this process alone.

Requests, each value a LaTeX answer as an extractor reads it (the content of a \\boxed{}):
- ["parse", value]: whether math-verify reads a mathematical object from it (false: no answer);
- ["same", a, b]: whether a verifies against b or b against a (math-verify's `verify(gold, target)` is asymmetric only
  where it simplifies an assignment or turns an equation into an interval; either direction makes one answer);
- ["is_gold", value, gold]: `verify(gold, value)`, the gold answer in the gold's place, as lm-eval's minerva_math and
  lighteval call it.

No timeout here: math-verify's own uses signal.alarm; the parent bounds every request by killing this process.
"""

import json
import logging
import sys


def main() -> None:
    reply_to = sys.stdout
    sys.stdout = sys.stderr  # a library's print must not corrupt the replies
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    # "Timeout is disabled ... you must provide the logic for timeout interruption yourself": the parent does
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    parsed: dict[str, list] = {}

    def read(value: str) -> list:
        if value not in parsed:
            parsed[value] = parse("\\boxed{" + value + "}", configs, fallback_mode="no_fallback",
                                  parsing_timeout=None)
        return parsed[value]

    def equal(gold: str, target: str) -> bool:
        return bool(read(gold)) and bool(read(target)) and verify(read(gold), read(target), timeout_seconds=None)

    operations = {"parse": lambda value: bool(read(value)),
                  "same": lambda a, b: equal(a, b) or equal(b, a),
                  "is_gold": lambda value, gold: equal(gold, value)}
    reply_to.write("ready\n")
    reply_to.flush()
    for line in sys.stdin:
        operation, *args = json.loads(line)
        try:
            result = bool(operations[operation](*args))
        except Exception:  # an answer math-verify chokes on is no answer, not the end of the run
            result = False
        reply_to.write(json.dumps(result) + "\n")
        reply_to.flush()


if __name__ == "__main__":
    main()
