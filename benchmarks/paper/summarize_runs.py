"""One Markdown table from several `lover compare` outputs: rows = strategies, columns = tasks.

    .venv/bin/python -m benchmarks.paper.summarize_runs benchmarks/results/paper_qwen2.5-coder-0.5b-instruct \
        > benchmarks/results/paper_qwen2.5-coder-0.5b-instruct/summary.md

Every `leaderboard.json` below the given folders is read; each cell is accuracy with its bootstrap 95% interval, and
the last rows give LoVer(sum) minus majority voting (paired bootstrap over the same questions) and the mean over the
tasks of each row (unweighted, as the paper's averages).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(folders: list[Path]) -> dict[str, dict]:
    """Task name -> its report entry, from every leaderboard.json below the folders."""
    tasks = {}
    for folder in folders:
        for path in sorted(folder.rglob("leaderboard.json")):
            for task, entry in json.loads(path.read_text())["tasks"].items():
                if task in tasks:
                    raise SystemExit(f"{task} appears twice (second time in {path}); summarise one run per task")
                tasks[task] = entry
    if not tasks:
        raise SystemExit(f"no leaderboard.json below {', '.join(map(str, folders))}")
    return tasks


def render(tasks: dict[str, dict]) -> str:
    names = list(tasks)
    # Rows in the order the leaderboards list them (every verifier a run scored), the pass@N oracle last.
    present = list(dict.fromkeys(row for t in tasks.values() for row in t["rows"] if row != "pass_at_n"))
    present += ["pass_at_n"] if any("pass_at_n" in t["rows"] for t in tasks.values()) else []
    short = [n.removeprefix("lover_").removeprefix("bbh_") for n in names]
    lines = ["| strategy | " + " | ".join(short) + " | mean |", "|---" * (len(names) + 2) + "|"]
    for row in present:
        cells, accs = [], []
        for name in names:
            cell = tasks[name]["rows"].get(row)
            cells.append(f"{cell['acc']:.3f} [{cell['low']:.2f}, {cell['high']:.2f}]" if cell else "–")
            accs.append(cell["acc"] if cell else None)
        mean = f"{sum(accs) / len(accs):.3f}" if None not in accs else "–"
        lines.append(f"| {row} | " + " | ".join(cells) + f" | {mean} |")
    n = [str(next(iter(tasks[name]["rows"].values()))["n"]) for name in names]
    lines.append("| n | " + " | ".join(n) + " | |")
    for base in ("majority", "cot_sum"):
        diffs = [tasks[name]["paired"].get(base) for name in names]
        cells = [f"{d['diff']:+.3f} [{d['low']:+.2f}, {d['high']:+.2f}]" if d else "–" for d in diffs]
        mean = f"{sum(d['diff'] for d in diffs) / len(diffs):+.3f}" if None not in diffs else "–"
        lines.append(f"| lover_sum − {base} | " + " | ".join(cells) + f" | {mean} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    print(render(load(parser.parse_args().folders)), end="")


if __name__ == "__main__":
    main()
