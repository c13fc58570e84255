"""A leaderboard of translation runs by test BLEU, read from the MLflow tracking store.

    python -m mtcore.report                                # every experiment in the project's store
    python -m mtcore.report --experiment tune_transformer --output runs/report
    python -m mtcore.report --store sqlite:////data/mlflow.db --ui-url http://127.0.0.1:5000

Prints the table and writes it as `leaderboard.md` and `leaderboard.html` in the
output directory (default `runs/report/`). Runs are ranked by `test/bleu`; next
to it: test chrF, the best dev BLEU, the model shape and the searched knobs, the
data version, the git commit. Training runs without a test BLEU (stopped early,
failed, still running) are listed below the ranking with their status, so that
nothing silently drops out. BLEU is only comparable under one sacreBLEU
signature: the signatures are printed, and a table mixing several says so.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mtcore.console import add_common_options, program
from mtcore.errors import entry_point
from mtcore.errors import MtcoreError
from mtcore.runs import home

TEST_BLEU, TEST_CHRF, DEV_BLEU = "test/bleu", "test/chrf", "dev/bleu"
BLEU_SIGNATURE = "sacrebleu.bleu_signature"
# The settings a reader compares runs by: (column, param); the rest are in MLflow's run page.
SETTINGS = (
    ("d", "model.d_model"), ("L", "model.layers"), ("h", "model.heads"), ("w", "train.warmup"),
    ("ls", "train.label_smoothing"), ("lr", "train.lr_scale"), ("drop", "model.dropout"),
)
HEADERS = ["#", "experiment", "run", "test BLEU", "test chrF", "dev BLEU", "direction", "test set", "settings", "data", "commit",
           "status", "parent run"]
PARENT_CHARS = 40  # a Tune search's name is long; its start says what it searched


class ReportError(MtcoreError, RuntimeError):
    """The report cannot be made; the message says why."""


@dataclass
class Row:
    experiment: str
    experiment_id: str
    run_id: str
    run_name: str
    status: str
    test_bleu: float | None
    test_chrf: float | None
    dev_bleu: float | None
    direction: str
    settings: str
    data_version: str
    commit: str
    signature: str
    parent: str = ""  # the Tune search a trial belongs to
    test_set: str = ""  # the test file, and how many of its pairs were decoded: BLEU compares within one

    @property
    def group(self) -> tuple[str, str]:
        """What makes two test BLEUs comparable besides the signature: the direction and the test pairs."""
        return self.direction, self.test_set

    def cells(self, rank: str) -> list[str]:
        return [rank, self.experiment, self.run_name, _num(self.test_bleu), _num(self.test_chrf), _num(self.dev_bleu),
                self.direction, self.test_set, self.settings, self.data_version, self.commit, self.status, _short(self.parent)]


@dataclass
class Leaderboard:
    store: str
    experiments: list[str]
    ranked: list[Row] = field(default_factory=list)  # by test BLEU, best first
    unscored: list[Row] = field(default_factory=list)  # training runs without test BLEU
    other_runs: dict[str, int] = field(default_factory=dict)  # experiment -> runs that are not translation models

    def ranks(self) -> list[str]:
        """Each ranked row's rank within its group (direction, test set): a vi→en reverse model scored on 500 test
        pairs ranked #1 above the en→vi models, on other pairs."""
        seen: dict[tuple[str, str], int] = {}
        out, last = [], {}  # equal BLEU as printed, equal rank (1, 2, 2, 4)
        for r in self.ranked:
            seen[r.group] = seen.get(r.group, 0) + 1
            shown = _num(r.test_bleu)
            if last.get(r.group, (None,))[0] != shown:
                last[r.group] = (shown, seen[r.group])
            out.append(str(last[r.group][1]))
        return out

    @property
    def groups(self) -> list[tuple[str, str]]:
        return list(dict.fromkeys(r.group for r in self.ranked))

    @property
    def signatures(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.ranked:
            counts[r.signature or "(none)"] = counts.get(r.signature or "(none)", 0) + 1
        return counts


def _short(s: str, n: int = PARENT_CHARS) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _num(v: float | None) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"


def _settings(params: dict[str, str]) -> str:
    arch = params.get("model.arch", "")
    parts = [arch] if arch else []
    for short, key in SETTINGS:
        if key == "model.heads" and arch and arch != "transformer":
            continue  # heads mean nothing to a recurrent model
        if key in params:
            value = params[key]
            try:
                value = f"{float(value):.3g}" if "." in value else value
            except ValueError:
                pass
            parts.append(f"{short}{value}" if short in ("d", "L", "h", "w") else f"{short}={value}")
    steps = params.get("train.max_steps", "0")
    budget = params.get("train.time_budget_min", "0")
    if steps not in ("0", ""):
        parts.append(f"steps={steps}")
    if budget not in ("0", "0.0", ""):
        parts.append(f"budget={budget}min")
    return " ".join(parts)


def _is_translation_run(run) -> bool:
    """A run that trains a translation model: it has BLEU, or a training job's test set. (A search's own run is not:
    its trials are the runs that train, and they are ranked.)"""
    return TEST_BLEU in run.data.metrics or DEV_BLEU in run.data.metrics or "job.test_data" in run.data.params


def _test_set(params: dict, tags: dict) -> str:
    """The test pairs a run's BLEU is on: the file as last tested (`mtcore.tested_with`: a finished run tested again
    on another file keeps its first params), told apart by its contents where two files share a name."""
    try:
        tested = json.loads(tags.get("mtcore.tested_with") or "{}")
    except ValueError:
        tested = {}
    path = tested.get("path") or params.get("job.test_data", "") or ""
    data = Path(path).name or "?"
    if tested.get("job.test_data") and tested["job.test_data"] != path:  # a content hash (the file existed)
        data += f" #{str(tested['job.test_data'])[:6]}"
    limit = str(tested.get("job.test_limit", params.get("job.test_limit", "0")))
    if limit not in ("0", "", "None") and tested.get("pairs") is not None:  # a limit above the file's size
        limit = str(min(int(limit), int(tested["pairs"]))) if limit.isdigit() else limit
    return f"{data} ({limit} pairs of it)" if limit not in ("0", "", "None") else data


def _best(client, run, key: str) -> float | None:
    """The best value of `key` in the run's history; of a search trial stopped early, up to the step the search
    stopped it at (`mtcore.tune.stopped_at_step`: its training ran on for seconds, past its judged score)."""
    if key not in run.data.metrics:
        return None
    history = client.get_metric_history(run.info.run_id, key)
    stopped_at = run.data.tags.get("mtcore.tune.stopped_at_step", "")
    if stopped_at.isdigit():
        history = [m for m in history if m.step <= int(stopped_at)]
    return max((m.value for m in history), default=run.data.metrics[key])


def build(store: str | None = None, experiment: str | None = None) -> Leaderboard:
    """Read every run of `experiment` (all experiments when None) from the store."""
    import mlflow

    from mtcore.tracking import as_store_uri, check_sqlite_store, require_server, tracking_uri

    # The store named (or the environment's), never the local fallback a training run records to when a server is
    # down: a report of another store's runs, under a warning about recording, read as this one's.
    store = as_store_uri(store or os.environ.get("MLFLOW_TRACKING_URI", "").strip()) or tracking_uri()
    check_sqlite_store(store, must_exist=True)
    require_server(store)  # a dead server fails in seconds, not after MLflow's minutes of retries
    client = mlflow.MlflowClient(tracking_uri=store)
    existing = {e.name: e for e in client.search_experiments()}
    if experiment is not None:
        if experiment not in existing:
            names = ", ".join(sorted(existing)) or "(none)"
            raise ReportError(f"experiment {experiment!r} not found in {store}; experiments there: {names}")
        chosen = [existing[experiment]]
    else:
        chosen = sorted(existing.values(), key=lambda e: e.name)
    board = Leaderboard(store, [e.name for e in chosen])
    for exp in chosen:
        runs = client.search_runs([exp.experiment_id], max_results=5000, order_by=["attributes.start_time ASC"])
        names = {r.info.run_id: r.info.run_name for r in runs}
        for run in runs:
            if not _is_translation_run(run):
                board.other_runs[exp.name] = board.other_runs.get(exp.name, 0) + 1
                continue
            p, m, t = run.data.params, run.data.metrics, run.data.tags
            src, tgt = p.get("model.src_lang"), p.get("model.tgt_lang")
            row = Row(
                experiment=exp.name, experiment_id=exp.experiment_id, run_id=run.info.run_id,
                run_name=run.info.run_name or run.info.run_id[:8], status=run.info.status,
                test_bleu=m.get(TEST_BLEU), test_chrf=m.get(TEST_CHRF), dev_bleu=_best(client, run, DEV_BLEU),
                direction=f"{src}→{tgt}" if src and tgt else "", settings=_settings(p),
                data_version=t.get("mtcore.data_version", ""), commit=t.get("mtcore.git_commit", ""),
                signature=t.get(BLEU_SIGNATURE, ""), parent=names.get(t.get("mlflow.parentRunId", ""), ""),
                test_set=_test_set(p, t),
            )
            scored = row.test_bleu is not None and math.isfinite(row.test_bleu) and row.status == "FINISHED"
            (board.ranked if scored else board.unscored).append(row)  # a failed or killed run's BLEU is no result
    order = {g: i for i, g in enumerate(sorted({r.group for r in board.ranked}))}
    board.ranked.sort(key=lambda r: (order[r.group], -r.test_bleu, r.experiment, r.run_name))
    return board


# --------------------------------------------------------------------------- rendering


def _run_link(ui_url: str | None, row: Row) -> str | None:
    return f"{ui_url.rstrip('/')}/#/experiments/{row.experiment_id}/runs/{row.run_id}" if ui_url else None


def _footer(board: Leaderboard) -> list[str]:
    lines = []
    if len(board.groups) > 1:
        lines.append("Ranked within each direction and test set (BLEU on other pairs is not comparable): "
                     + "; ".join(f"{d or '?'} on {t}" for d, t in board.groups))
    sigs = board.signatures
    if len(sigs) > 1:
        lines.append("Warning: these BLEU scores come from different sacreBLEU signatures and are not comparable:")
    for sig, n in sigs.items():
        lines.append(f"sacreBLEU signature ({n} run{'s' if n != 1 else ''}): {sig}")
    if board.other_runs:
        lines.append("Runs that train no translation model themselves (pipelines, encoders, searches, whose trials are "
                     "ranked), not ranked: "
                     + ", ".join(f"{e} {n}" for e, n in sorted(board.other_runs.items())))
    return lines


def _unscored_cells(r: Row) -> list[str]:
    return [r.experiment, r.run_name, r.status, _num(r.dev_bleu), r.settings, _short(r.parent)]


UNSCORED_HEADERS = ["experiment", "run", "status", "dev BLEU", "settings", "parent run"]


def to_text(board: Leaderboard) -> str:
    def table(headers, rows):
        widths = [max(len(h), *(len(c) for c in col)) if rows else len(h) for h, col in zip(headers, zip(*rows) if rows else [[]] * len(headers))]
        def fmt(cells):
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

        return [fmt(headers), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]

    out = [f"Leaderboard by test BLEU — {board.store} — experiments: {', '.join(board.experiments) or '(none)'}", ""]
    if board.ranked:
        out += table(HEADERS, [r.cells(rank) for rank, r in zip(board.ranks(), board.ranked)])
    else:
        out.append("No run has a test BLEU yet.")
    if board.unscored:
        out += ["", f"Without test BLEU ({len(board.unscored)}):"]
        out += table(UNSCORED_HEADERS, [_unscored_cells(r) for r in board.unscored])
    footer = _footer(board)
    return "\n".join(out + ([""] + footer if footer else [])) + "\n"


_MD_SPECIAL = re.compile(r"([\\|<>\[\]`*])")  # not "_": GitHub's Markdown leaves tune_transformer as it is


def _md_escape(s: str) -> str:
    """A cell's text as text: a run renamed in the MLflow UI may hold a newline (which ends the row), HTML or a link."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(s.split()))


def to_markdown(board: Leaderboard, ui_url: str | None = None) -> str:
    def table(headers, rows, escape=True):
        return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + [
            "| " + " | ".join(_md_escape(c) if escape else c for c in r) + " |" for r in rows
        ]

    out = ["# Leaderboard by test BLEU", "", f"Store: `{board.store}`; experiments: {', '.join(board.experiments) or '(none)'}", ""]
    rows = []
    for rank, r in zip(board.ranks(), board.ranked):
        cells = [_md_escape(c) for c in r.cells(rank)]
        link = _run_link(ui_url, r)
        if link:
            cells[2] = f"[{cells[2]}]({link})"
        rows.append(cells)
    out += table(HEADERS, rows, escape=False) if rows else ["No run has a test BLEU yet."]
    if board.unscored:
        out += ["", f"## Without test BLEU ({len(board.unscored)})", ""]
        out += table(UNSCORED_HEADERS, [_unscored_cells(r) for r in board.unscored])
    footer = _footer(board)
    if footer:
        out += [""] + [f"- {_md_escape(line)}" for line in footer]
    return "\n".join(out) + "\n"


def to_html(board: Leaderboard, ui_url: str | None = None) -> str:
    e = html.escape

    def table(headers, rows, links=None):
        head = "".join(f"<th>{e(h)}</th>" for h in headers)
        body = []
        for i, r in enumerate(rows):
            cells = [e(c) for c in r]
            if links and links[i]:
                cells[2] = f'<a href="{e(links[i])}">{cells[2]}</a>'
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"

    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>mtcore leaderboard</title>",
        ("<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f3f3f3}</style></head><body>"),
        "<h1>Leaderboard by test BLEU</h1>",
        f"<p>Store: <code>{e(board.store)}</code>; experiments: {e(', '.join(board.experiments) or '(none)')}</p>",
    ]
    if board.ranked:
        parts.append(table(HEADERS, [r.cells(rank) for rank, r in zip(board.ranks(), board.ranked)],
                           [_run_link(ui_url, r) for r in board.ranked]))
    else:
        parts.append("<p>No run has a test BLEU yet.</p>")
    if board.unscored:
        parts.append(f"<h2>Without test BLEU ({len(board.unscored)})</h2>")
        parts.append(table(UNSCORED_HEADERS, [_unscored_cells(r) for r in board.unscored]))
    parts += [f"<p>{e(line)}</p>" for line in _footer(board)]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write(board: Leaderboard, output: str | Path, ui_url: str | None = None) -> tuple[Path, Path]:
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    md, page = output / "leaderboard.md", output / "leaderboard.html"
    md.write_text(to_markdown(board, ui_url), encoding="utf-8")
    page.write_text(to_html(board, ui_url), encoding="utf-8")
    return md, page


@entry_point
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=program("python -m mtcore.report"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", default=None, help="one MLflow experiment (default: all of them)")
    ap.add_argument("--output", default=str(home() / "report"), help="where leaderboard.md/.html go (default: %(default)s)")
    ap.add_argument("--store", default=None, help="tracking store or server URI (default: MLFLOW_TRACKING_URI, else runs/mlflow.db)")
    ap.add_argument("--ui-url", default=None, help="link run names to this MLflow UI, e.g. http://127.0.0.1:5000")
    add_common_options(ap)
    args = ap.parse_args(argv)
    try:
        board = build(args.store, args.experiment)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(to_text(board), end="")
    md, page = write(board, args.output, args.ui_url)
    print(f"\nwritten: {md}  {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
