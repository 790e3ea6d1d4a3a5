"""The README's leaderboard figures from selectors_table.py's table: `docs/leaderboard.png`, one panel per set, and
`docs/leaderboard_pooled.png`, one panel per model size and task family with its sets pooled; accuracy minus majority
voting with its 95% paired interval per selector (a selector not measured on a set or on every set of a panel has no
point there)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

FIGURE_COLUMNS = 5  # panels a row: 14 sets in one row would be too wide for a README


def draw(table: dict, strategies: list[str], path: Path) -> None:
    """Per set of `table` a panel; per strategy in `strategies` (top to bottom), its accuracy minus majority with
    the interval, coloured by verdict."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI or servers
    import matplotlib.pyplot as plt

    sets = list(table["sets"])
    columns = min(FIGURE_COLUMNS, len(sets))
    grid_rows = -(-len(sets) // columns)
    fig, axes = plt.subplots(grid_rows, columns, figsize=(3.2 * columns, grid_rows * (0.3 * len(strategies) + 1.3)),
                             sharey=True, squeeze=False)
    for ax, name in zip(axes.flat, sets):
        rows = table["sets"][name]
        _points(ax, {s: rows[s]["minus_majority"] for s in strategies if s in rows}, strategies)
        ax.set_title(f"{name}\nmajority {rows['majority']['acc']:.2f}, n = {rows['majority']['n']}", fontsize=9)
    _finish(fig, axes, len(sets), path)


def _points(ax, differences: dict[str, dict], strategies: list[str]) -> None:
    """One row per strategy (top to bottom), its difference and interval where `differences` has it."""
    for k, s in enumerate(strategies):
        d = differences.get(s)
        if d is None:
            continue
        # Colour says the verdict: green above majority, red below, blue where the interval holds 0.
        colour = "tab:green" if d["low"] > 0 else "tab:red" if d["high"] < 0 else "tab:blue"
        ax.errorbar(d["diff"], k, xerr=[[d["diff"] - d["low"]], [d["high"] - d["diff"]]], fmt="o", ms=4, color=colour)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(np.arange(len(strategies)), strategies, fontsize=8)
    ax.set_xlabel("accuracy − majority", fontsize=8)


def _finish(fig, axes, used: int | list, path: Path) -> None:
    """Hide the panels not `used` (the first `used` of the grid, or those listed), then write the figure."""
    import matplotlib.pyplot as plt

    for k, ax in enumerate(axes.flat):
        ax.set_visible(k < used if isinstance(used, int) else ax in used)
    axes[0, 0].invert_yaxis()  # once: the axes share y, so inverting each would undo it on every other panel
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_pooled(panels: list[dict], strategies: list[str], path: Path) -> None:
    """Per panel of `pooled.pooled_panels` (a model size's sets of one task family, pooled), per strategy measured on
    all of them, its accuracy minus majority with the interval; one row of panels per model size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(dict.fromkeys(p["size"] for p in panels))
    columns = max(sum(p["size"] == size for p in panels) for size in sizes)
    fig, axes = plt.subplots(len(sizes), columns, figsize=(3.6 * columns, len(sizes) * (0.24 * len(strategies) + 1.4)),
                             sharey=True, squeeze=False)
    used = []
    for r, size in enumerate(sizes):
        for c, panel in enumerate(p for p in panels if p["size"] == size):
            ax = axes[r, c]
            used.append(ax)
            _points(ax, panel["minus_majority"], strategies)
            count = len(panel["sets"])  # which sets: leaderboard.md's LoVer table and the README name them
            ax.set_title(f"{size}, {panel['family']} ({count} set{'s' * (count > 1)} pooled)\n"
                         f"majority {panel['majority_acc']:.2f}, n = {panel['n']}", fontsize=9)
    _finish(fig, axes, used, path)
