"""The README's leaderboard figure (`docs/leaderboard.png`) from selectors_table.py's table: one panel per set, accuracy
minus majority voting with its 95% paired interval per selector."""

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
    y = np.arange(len(strategies))
    for ax, name in zip(axes.flat, sets):
        rows = table["sets"][name]
        for k, s in enumerate(strategies):
            d = rows[s]["minus_majority"]
            # Colour says the verdict: green above majority, red below, blue where the interval holds 0.
            colour = "tab:green" if d["low"] > 0 else "tab:red" if d["high"] < 0 else "tab:blue"
            ax.errorbar(d["diff"], k, xerr=[[d["diff"] - d["low"]], [d["high"] - d["diff"]]], fmt="o", ms=4,
                        color=colour)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_title(f"{name}\nmajority {rows['majority']['acc']:.2f}, n = {rows['majority']['n']}", fontsize=9)
        ax.set_yticks(y, strategies, fontsize=8)
        ax.set_xlabel("accuracy − majority", fontsize=8)
    for ax in list(axes.flat)[len(sets):]:
        ax.set_visible(False)
    axes[0, 0].invert_yaxis()  # once: the axes share y, so inverting each would undo it on every other panel
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
