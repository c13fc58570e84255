"""PNG figures for MLflow: attention heatmaps and learning curves (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: workers and CI have no screen
import matplotlib.pyplot as plt  # noqa: E402


def attention_heatmap(weights, x_labels: list[str], y_labels: list[str], title: str, path: str | Path) -> Path:
    """One (rows = queries, columns = keys) matrix, averaged over heads by the caller."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    size = (max(4.0, 0.35 * len(x_labels) + 2), max(3.0, 0.35 * len(y_labels) + 1.5))
    fig, ax = plt.subplots(figsize=size)
    ax.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0)
    ax.set_xticks(range(len(x_labels)), x_labels, rotation=90, fontsize=8)
    ax.set_yticks(range(len(y_labels)), y_labels, fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def learning_curves(history: dict[str, list[tuple[int, float]]], path: str | Path) -> Path:
    """train/loss and dev/loss on the left axis, dev/bleu on the right, against the step."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    for name in ("train/loss", "dev/loss"):
        if history.get(name):
            steps, values = zip(*history[name])
            ax.plot(steps, values, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (per token)")
    if history.get("dev/bleu"):
        right = ax.twinx()
        steps, values = zip(*history["dev/bleu"])
        right.plot(steps, values, "o-", color="tab:green", label="dev/bleu")
        right.set_ylabel("dev BLEU")
        right.legend(loc="upper right")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
