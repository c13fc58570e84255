"""PNG figures for MLflow: attention heatmaps and learning curves (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: workers and CI have no screen
import matplotlib.pyplot as plt


def _drawable(labels: list[str]) -> list[str]:
    """Labels with each character the default font has no glyph for as its code point (U+732B): matplotlib drew
    CJK pieces as empty boxes, with a warning per glyph (390 of a ja-en run's 407 output lines)."""
    from matplotlib.font_manager import FontProperties, findfont
    from matplotlib.ft2font import FT2Font

    font = FT2Font(findfont(FontProperties()))
    return ["".join(c if c.isspace() or font.get_char_index(ord(c)) else f"U+{ord(c):04X}" for c in label)
            for label in labels]


def attention_heatmap(weights, x_labels: list[str], y_labels: list[str], title: str, path: str | Path) -> Path:
    """One (rows = queries, columns = keys) matrix, averaged over heads by the caller."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    x_labels, y_labels, (title,) = _drawable(x_labels), _drawable(y_labels), _drawable([title])
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


def count_bars(counts: dict[str, int], title: str, path: str | Path) -> Path:
    """Horizontal bars, one per reason (rows rejected by each rule), largest on top, with the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    items = sorted(counts.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(7, max(2.0, 0.4 * len(items) + 1.2)))
    if items:
        labels, values = zip(*items)
        bars = ax.barh(labels, values, color="tab:red")
        ax.bar_label(bars, labels=[f"{v:,}" for v in values], fontsize=8, padding=2)
    else:
        ax.text(0.5, 0.5, "nothing rejected", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("rows")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def score_histograms(scores: dict[str, list[float]], title: str, path: str | Path, bins: int = 40) -> Path:
    """One small histogram per rule of the scores that made it reject rows (a rule with no score is left out)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [n for n, v in scores.items() if len(v)]
    cols = min(3, max(1, len(names)))
    rows = max(1, -(-len(names) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        ax.hist(scores[name], bins=bins, color="tab:blue")
        ax.set_title(f"{name} (n={len(scores[name]):,})", fontsize=9)
        ax.set_xlabel("score", fontsize=8)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    if not names:
        axes.flat[0].text(0.5, 0.5, "no scored rejects", ha="center", va="center", transform=axes.flat[0].transAxes)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
