"""Plots for the apps (optional: the `plots` extra installs matplotlib; without it each plot is skipped with one
warning line)."""

from __future__ import annotations

from pathlib import Path

from ..core.files import atomic_path

from ..log import log


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend, or None when the `plots` extra is not installed (imported
    here, not at module level, because it is optional and slow to import)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no plots (pip install 'lover-lmeval[plots]')")
        return None
    return plt


def plot_history(history: list[dict], path: Path) -> None:
    plt = _pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    terms = [k for k in history[0] if k not in ("restart", "epoch")]
    for restart in sorted({row["restart"] for row in history}):
        rows = [r for r in history if r["restart"] == restart]
        for term in terms:
            ax.plot([r["epoch"] for r in rows], [r[term] for r in rows], label=f"r{restart} {term}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def plot_curves(curves: dict[str, dict], path: Path, x: str = "n", xlabel: str = "N (branches)",
                strategies: tuple[str, ...] = ("majority", "lover_sum")) -> None:
    plt = _pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for task, curve in curves.items():
        for strategy, style in zip(strategies, ("--", "-", ":")):
            ax.plot(curve[x], curve[strategy], style, marker="o", label=f"{task} {strategy}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
