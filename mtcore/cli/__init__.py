"""`mtcore COMMAND ...`: the console script. Each command is the code a documented script runs.

`mtcore clean ARGS` is `python pipelines/clean.py ARGS`, `mtcore train ARGS` is
`python experiments/train_transformer.py ARGS`, and so on; the scripts stay as the documented
entry points of a checkout, the console script is what `pip install .` gives everyone else.
A command's module is imported only when it runs, so `mtcore --help` does not load Ray or torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name → (module with main(argv), the script of a checkout that runs the same code, what it does)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "clean": ("mtcore.cli.clean", "pipelines/clean.py", "clean a parallel corpus: kept, reason-coded rejects, report"),
    "align-filter": ("mtcore.cli.align_filter", "pipelines/align_filter.py", "drop misaligned pairs by margin score (or cosine, classifier, dual_xent)"),
    "align-docs": ("mtcore.cli.align_docs", "pipelines/align_docs.py", "align the sentences of two documents"),
    "backtranslate": ("mtcore.cli.backtranslate", "pipelines/backtranslate.py",
                      "the main job: clean, filter, train a reverse model, back-translate, assemble"),
    "train": ("mtcore.cli.train", "experiments/train_transformer.py", "train a Transformer with Ray Train DDP"),
    "tune": ("mtcore.cli.tune", "experiments/tune_transformer.py", "search hyperparameters with Ray Tune"),
    "translate": ("mtcore.translate", "python -m mtcore.translate", "translate text with a trained model"),
    "evaluate": ("mtcore.evaluate", "python -m mtcore.evaluate", "BLEU/chrF of a model on a test set"),
    "export": ("mtcore.export", "python -m mtcore.export", "export a model to CTranslate2 or Hugging Face"),
    "ui": ("mtcore.ui", "python -m mtcore.ui", "start the MLflow UI on the runs' store"),
    "report": ("mtcore.report", "python -m mtcore.report", "the leaderboard of every tracked run"),
}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="mtcore", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="`mtcore COMMAND --help` shows a command's options and examples.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, script, summary) in COMMANDS.items():
        sub.add_parser(name, help=f"{summary} (= {script})", add_help=False)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        build_parser().parse_args(argv)  # --help, or an unknown command: argparse prints and exits
        return 2
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(COMMANDS[name][0])
    sys.argv[0] = f"mtcore {name}"  # the command's own parser names itself after it in usage and errors
    return module.main(rest)
