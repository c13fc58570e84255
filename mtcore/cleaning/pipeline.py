"""The cleaning stage: normalise, apply the row-wise rules batch by batch, deduplicate globally, split.

Three steps, the same with or without Ray:

1. `score_batch` (row-wise, any batch size): normalise `src`/`tgt`, run the
   row-wise rules in order on the rows still alive (the first rejecting rule
   gives the reason, its score and a detail), and add the 64-bit duplicate keys.
2. `decide_duplicates` (global): among the rows no rule rejected, keep the
   first by `id` of every exact key, then of every normalised key. It needs
   only four small columns of the whole corpus, so it runs on the driver.
3. `finalize_kept`/`finalize_rejects` (row-wise): mark the duplicates, then split
   into kept rows (the input's columns, normalised text) and rejects (`REJECT_SCHEMA`).

`clean_table` runs them in process. `clean_dataset` runs step 1 — all the
rules — as Ray Data `map_batches` tasks over blocks of the corpus, in file order (one task per CPU
at a time), spilling its output to `OUTPUT/_scored/`; steps 2 and 3 stream that
on the driver (a few small columns, then Arrow I/O). Both give the same rows.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from mtcore import checks
from mtcore.console import progress_line
from mtcore.cleaning.config import CleaningConfig, load_config
from mtcore.cleaning.normalize import normalize_table
from mtcore.data.corpus import swap_sides
from mtcore.data.ledger import REJECT_SCHEMA, StageReport, write_report

log = logging.getLogger(__name__)

STAGE = "clean"
EXPERIMENT = "clean"  # the MLflow experiment of `pipelines/clean.py`
NORMALIZATIONS = ("nfc", "invisible", "whitespace", "pseudo_context", "accelerators")
INTERNAL = ("_reason", "_score", "_detail", "_h_exact", "_h_near", "_rowkey") + tuple(f"_n_{n}" for n in NORMALIZATIONS)
META_COLUMNS = ["id", "_reason", "_h_exact", "_h_near", "_rowkey"] + [f"_n_{n}" for n in NORMALIZATIONS]
BATCH_SIZE = 4096
ROWS_PER_BLOCK = 25_000
# The code a cleaned corpus depends on (its fingerprint): the tokenizer module lends normalisation its invisible
# characters, so an edit there is another output too
CLEANING_CODE = ("mtcore.cleaning", "mtcore.data", "mtcore.nmt.tokenizer")


# --------------------------------------------------------------------------- step 1: row-wise


def score_batch(batch: pa.Table, cfg: CleaningConfig) -> pa.Table:
    """Normalised batch with the reason/score/detail of the first rejecting rule and duplicate keys."""
    n = len(batch)
    table, changed = normalize_table(batch, cfg.normalize, english_side=cfg.english_side)
    reason = np.full(n, None, dtype=object)
    score = np.full(n, np.nan)
    detail = np.full(n, None, dtype=object)
    alive = np.arange(n)
    seen = swap_sides(table) if cfg.sides_swapped else table  # a vi-en corpus is judged as en-vi
    for rule in cfg.row_rules:
        if len(alive) == 0:
            break
        sub = seen if len(alive) == n else seen.take(pa.array(alive))
        scores = rule.score(sub)
        ok = np.asarray(rule.accept(scores), dtype=bool)
        if not ok.all():
            bad = ~ok
            idx = alive[bad]
            reason[idx] = rule.reason
            score[idx] = np.asarray(scores[rule.score_key], dtype=float)[bad]
            detail[idx] = rule.details(sub, scores, bad)
            alive = alive[ok]
    cols = {
        "_reason": pa.array(reason, pa.string()),
        "_score": pa.array(score, pa.float64(), from_pandas=True),  # NaN → null: no score
        "_detail": pa.array(detail, pa.string()),
    }
    dup = next(iter(cfg.global_rules), None)
    keys = dup.keys(table) if dup is not None else {"exact": np.zeros(n, np.uint64), "near": np.zeros(n, np.uint64)}
    cols["_h_exact"] = pa.array(keys["exact"], pa.uint64())
    cols["_h_near"] = pa.array(keys["near"], pa.uint64())
    # A row identity for the global step; random, because rows identical in id and text are interchangeable.
    base = int(np.random.default_rng().integers(0, 2**62))
    cols["_rowkey"] = pa.array(np.arange(n, dtype=np.uint64) + np.uint64(base), pa.uint64())
    for name in NORMALIZATIONS:
        mask = changed.get(name, np.zeros(n, dtype=bool))
        cols[f"_n_{name}"] = pa.array(mask, pa.bool_())
    for name, arr in cols.items():
        table = table.append_column(name, arr)
    return table


# --------------------------------------------------------------------------- step 2: global


@dataclass
class DuplicateDecision:
    """Rows (by `_rowkey`) that the global step rejects, with reason and detail."""

    rowkeys: np.ndarray
    reasons: np.ndarray
    details: np.ndarray
    _index: pd.Index | None = field(default=None, repr=False, compare=False)

    def index(self) -> pd.Index:
        """Built once: the split looks every batch's rows up in it (a new index per batch cost O(duplicates) each
        time, hours over a 50M-row corpus)."""
        if self._index is None:
            self._index = pd.Index(self.rowkeys)
        return self._index


def decide_duplicates(meta: pa.Table, cfg: CleaningConfig) -> DuplicateDecision:
    """Keep the first row by id (NAME:LINE ids by line) of each exact key, then of each normalised key; reject the rest."""
    dup = next(iter(cfg.global_rules), None)
    empty = DuplicateDecision(np.zeros(0, np.uint64), np.zeros(0, object), np.zeros(0, object))
    if dup is None or len(meta) == 0:
        return empty
    df = meta.select(["id", "_reason", "_h_exact", "_h_near", "_rowkey"]).to_pandas()
    df = df[df["_reason"].isna()]
    # NAME:LINE ids (the text readers'; a catalog's plural form NAME:LINE/1) in line order: as text, file.tsv:10
    # came before file.tsv:2
    df = df.assign(_order=df["id"].str.replace(r":(\d+)(?=(?:/\d+)?$)", lambda m: ":" + m.group(1).zfill(12), regex=True))
    df = df.sort_values(["_order", "_h_exact", "_rowkey"], kind="stable")
    out_keys, out_reasons, out_details = [], [], []
    for key, reason, enabled in (("_h_exact", dup.reason, True), ("_h_near", dup.near_reason, dup.normalized)):
        if not enabled or df.empty:
            continue
        first_id = df.groupby(key, sort=False)["id"].transform("first")
        is_dup = df.duplicated(key, keep="first").to_numpy()
        out_keys.append(df["_rowkey"].to_numpy()[is_dup])
        out_reasons.append(np.full(int(is_dup.sum()), reason, dtype=object))
        out_details.append(("duplicate of id " + first_id[is_dup].astype(str)).to_numpy(dtype=object))
        df = df[~is_dup]
    if not out_keys:
        return empty
    return DuplicateDecision(np.concatenate(out_keys).astype(np.uint64), np.concatenate(out_reasons), np.concatenate(out_details))


# --------------------------------------------------------------------------- step 3: split


def _with_duplicates(batch: pa.Table, dups: DuplicateDecision) -> tuple[np.ndarray, np.ndarray]:
    reason = batch.column("_reason").to_numpy(zero_copy_only=False).astype(object)
    detail = batch.column("_detail").to_numpy(zero_copy_only=False).astype(object)
    if len(dups.rowkeys):
        pos = dups.index().get_indexer(batch.column("_rowkey").to_numpy())
        hit = pos >= 0
        reason[hit] = dups.reasons[pos[hit]]
        detail[hit] = dups.details[pos[hit]]
    return reason, detail


def finalize_kept(batch: pa.Table, dups: DuplicateDecision) -> pa.Table:
    reason, _ = _with_duplicates(batch, dups)
    keep = pa.array(pd.isna(reason))
    return batch.filter(keep).drop_columns([c for c in INTERNAL if c in batch.column_names])


def finalize_rejects(batch: pa.Table, dups: DuplicateDecision) -> pa.Table:
    reason, detail = _with_duplicates(batch, dups)
    rej = ~pd.isna(reason)
    idx = pa.array(np.flatnonzero(rej))
    sub = batch.take(idx)
    n = len(sub)
    return pa.table(
        {
            "src": sub.column("src"),
            "tgt": sub.column("tgt"),
            "origin": sub.column("origin").cast(pa.string()),
            "id": sub.column("id").cast(pa.string()),
            "stage": pa.array([STAGE] * n, pa.string()),
            "reason": pa.array(reason[rej], pa.string()),
            "score": sub.column("_score"),  # null for duplicates and rules without a score
            "detail": pa.array(detail[rej], pa.string()),
        },
        schema=REJECT_SCHEMA,
    )


def make_report(meta: pa.Table, dups: DuplicateDecision, cfg: CleaningConfig, **extra) -> StageReport:
    reasons = pd.Series(meta.column("_reason").to_numpy(zero_copy_only=False)).dropna()
    counts = reasons.value_counts().to_dict()
    for r, c in pd.Series(dups.reasons, dtype=object).value_counts().items():
        counts[r] = counts.get(r, 0) + int(c)
    rejected = sum(counts.values())
    normalized = {n: int(np.asarray(meta.column(f"_n_{n}").to_numpy(zero_copy_only=False)).sum()) for n in NORMALIZATIONS}
    report = StageReport(
        STAGE,
        input=len(meta),
        kept=len(meta) - rejected,
        rejected={k: int(v) for k, v in sorted(counts.items())},
        extra={"normalized_rows": normalized, "rule_order": [r.name() for r in cfg.rules], **extra},
    )
    return report.reconcile()


# --------------------------------------------------------------------------- without Ray


def clean_table(table: pa.Table, cfg: CleaningConfig | None = None, batch_size: int = BATCH_SIZE):
    """(kept, rejects, report) for an in-memory corpus, without Ray."""
    cfg = cfg or load_config()
    if len(table) == 0:
        scored = score_batch(table, cfg)
    else:
        scored = pa.concat_tables(
            [score_batch(table.slice(i, batch_size), cfg) for i in range(0, len(table), batch_size)]
        )
    dups = decide_duplicates(scored, cfg)
    kept = finalize_kept(scored, dups)
    rejects = finalize_rejects(scored, dups)
    report = make_report(scored.select(META_COLUMNS), dups, cfg)
    return kept, rejects, report


def split_scored(scored_dir: Path, output: Path, dups: DuplicateDecision, batch_rows: int = 65_536) -> None:
    """Stream the scored rows into OUTPUT/kept/ and OUTPUT/rejects/ (Arrow I/O, one pass, bounded memory).

    The expensive, row-wise work ran on Ray Data; this step only filters columns it
    already has, and as a Ray Data job it cost more in scheduling than in work.
    """
    source = pads.dataset(str(scored_dir), format="parquet")
    kept_schema = pa.schema([f for f in source.schema if f.name not in INTERNAL])
    (output / "kept").mkdir(parents=True, exist_ok=True)
    (output / "rejects").mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(output / "kept" / "part-0.parquet", kept_schema, compression="zstd") as kw, pq.ParquetWriter(
        output / "rejects" / "part-0.parquet", REJECT_SCHEMA, compression="zstd"
    ) as rw:
        for batch in source.to_batches(batch_size=batch_rows):
            table = pa.Table.from_batches([batch])
            kw.write_table(finalize_kept(table, dups).cast(kept_schema))
            rw.write_table(finalize_rejects(table, dups))


# --------------------------------------------------------------------------- with Ray Data


@dataclass
class CleanResult:
    output: Path
    report: dict
    skipped: bool = False


def stage_settings(cfg: CleaningConfig) -> tuple[dict, dict[str, Path]]:
    """The cleaning stage's settings, and the held-out sets TestOverlap reads as inputs: they count by
    their contents, not their paths, so that a moved or second checkout reuses its cleaned corpus
    while an edited dev/test set still makes it again."""
    settings, heldout = cfg.to_dict(), {}
    for rule in settings["rules"]:
        params = rule.get("TestOverlap")
        if params and params.get("paths"):
            names = [f"heldout_{len(heldout) + i}" for i in range(len(params["paths"]))]
            heldout |= {name: Path(p).absolute() for name, p in zip(names, params["paths"])}
            params["paths"] = [f"input {name}" for name in names]
    return settings, heldout


def outputs_exist(output: Path) -> bool:
    return (output / "report.json").is_file() and (output / "kept").is_dir() and (output / "rejects").is_dir()


def clean_dataset(
    input_path: str | Path,
    output: str | Path,
    cfg: CleaningConfig | None = None,
    *,
    overwrite: bool = False,
    num_cpus: int | None = None,
    rows_per_block: int = ROWS_PER_BLOCK,
    track: bool = False,
) -> CleanResult:
    """Clean a corpus on Ray Data; writes OUTPUT/kept/, OUTPUT/rejects/ and OUTPUT/report.json.

    OUTPUT is a `runs.Stage`: made with the same rules, code and input contents, it is reused (the
    existing report is returned, `skipped`); made with others, it is refused unless `overwrite`.
    With `track`, the report, a bar chart of rejects by reason and the rules' score
    histograms are also logged as an MLflow run (experiment `clean`; see `track_clean`).
    """
    import ray

    from mtcore.distributed.cluster import available_cpus, init_ray
    from mtcore.data.corpus import CorpusError, check_exists, load_corpus
    from mtcore.runs import Stage, resolve_data

    output, input_path = Path(output), resolve_data(input_path)[0]  # a stage folder counts by its kept/
    checks.at_least("--num-cpus", num_cpus, 1)
    checks.output_dir(output)
    cfg = cfg or load_config()
    check_exists(input_path, *cfg.languages)
    # Absolute paths: Ray's workers do not share the driver's working directory.
    for rule in cfg.rules:
        rule.ready()
    settings, heldout = stage_settings(cfg)
    stage = Stage(output.absolute(), "clean", settings=settings, inputs={"corpus": input_path.absolute(), **heldout},
                  code=CLEANING_CODE, languages=cfg.languages,
                  extras=("kept.*", "rejects_by_reason.png", "score_histograms.png"))  # --format exports; MLflow's plots
    if stage.reuse(overwrite) is not None:
        return CleanResult(output, json.loads((output / "report.json").read_text(encoding="utf-8")), skipped=True)

    # Every format is read on the driver (its errors come before Ray starts) and handed to Ray Data as one table,
    # cut into blocks in file order. Ray Data's own parallel Parquet read passed its blocks on in varying order:
    # two runs on the embedded corpus wrote the same kept rows in two orders, and the splits and training
    # batches made from them differed. The scoring, not the read, is the work that needs the CPUs.
    table = load_corpus(input_path, src_lang=cfg.languages[0], tgt_lang=cfg.languages[1]).table
    if clash := [name for name in table.column_names if name in INTERNAL]:  # they failed deep inside a Ray worker
        raise CorpusError(f"{input_path}: column(s) {', '.join(repr(c) for c in clash)} have the name(s) of the cleaning's "
                          f"working columns ({', '.join(INTERNAL)}); rename or drop them")
    rows = len(table)
    if rows == 0:
        raise CorpusError(f"{input_path}: corpus is empty")
    # Ray's start and Ray Data's first progress line take about 20 s: say what is coming first.
    progress_line(f"cleaning {rows:,} pairs of {input_path} on Ray Data")
    init_ray(num_cpus=num_cpus)
    cpus = max(1, available_cpus())
    blocks = max(cpus, math.ceil(rows / rows_per_block))
    ds = ray.data.from_arrow(table).repartition(blocks)

    with stage.writing() as work:
        scored_dir = work / "_scored"
        ds.map_batches(score_batch, fn_kwargs={"cfg": cfg}, batch_format="pyarrow",
                       batch_size=BATCH_SIZE).write_parquet(str(scored_dir))
        meta = pq.read_table(scored_dir, columns=META_COLUMNS)
        dups = decide_duplicates(meta, cfg)
        split_scored(scored_dir, work, dups)
        shutil.rmtree(scored_dir)
        report = make_report(meta, dups, cfg, blocks=blocks, cpus=cpus)
        write_report(work / "report.json", report, input_path=str(input_path), config=cfg.to_dict())
        stage.finish({"input": report.input, "kept": report.kept})
    body = json.loads((output / "report.json").read_text(encoding="utf-8"))
    warn_dominant_rejects(body, cfg)
    if track:
        run_id = track_clean(input_path, output, body, cfg)
        if run_id:
            body["mlflow_run_id"] = run_id
    return CleanResult(output, body)


def warn_dominant_rejects(report: dict, cfg: CleaningConfig, share: float = 0.5) -> None:
    """A rule that rejects most of a corpus is more likely wrong for it than the corpus bad: say so, with the
    usual cause (a corpus of other languages than the rules expect, e.g. de-en cleaned as en-vi)."""
    n = report.get("input", 0)
    for reason, count in sorted(report.get("rejected", {}).items(), key=lambda kv: -kv[1]):
        if n and count > share * n:
            hint = (f"; is the corpus {'-'.join(cfg.languages)}, source first? pass its languages with --langs SRC-TGT "
                    f"(clean, align_filter, training), or swap its columns"
                    if reason == "wrong_language" else "; check that rule's settings for this corpus (--config)")
            log.warning("%s rejected %s of %s pairs (%.0f %%)%s", reason, f"{count:,}", f"{n:,}", 100 * count / n, hint)


# --------------------------------------------------------------------------- MLflow


def report_figures(output: Path) -> list[Path]:
    """OUTPUT/rejects_by_reason.png and OUTPUT/score_histograms.png from OUTPUT/report.json and OUTPUT/rejects/."""
    from mtcore.tracking.plots import count_bars, score_histograms

    report = json.loads((output / "report.json").read_text(encoding="utf-8"))
    rejects = pq.read_table(output / "rejects", columns=["reason", "score"]).to_pandas()
    scored = rejects.dropna(subset=["score"])
    scores = {reason: group["score"].tolist() for reason, group in scored.groupby("reason")}
    n_in = report["input"]
    return [
        count_bars(report["rejected"], f"clean: rows rejected by reason ({n_in:,} in, {report['kept']:,} kept)",
                   output / "rejects_by_reason.png"),
        score_histograms(scores, "clean: scores of rejected rows, by rule", output / "score_histograms.png"),
    ]


def track_clean(input_path: Path, output: Path, report: dict, cfg: CleaningConfig) -> str | None:
    """One MLflow run for a finished cleaning stage; a tracking failure warns and never loses the stage."""
    try:
        from mtcore import tracking
        from mtcore.tracking.run import tracked_run

        figures = report_figures(output)
        name = f"clean-{_input_label(input_path)}"
        params = tracking.flatten({"input": str(input_path), "config": cfg.to_dict()})
        with tracked_run(EXPERIMENT, name, tags=tracking.standard_tags("pipelines/clean.py", input_path), params=params) as run:
            # The names the back-translation pipeline uses for its clean stage, so the runs compare side by side.
            metrics = {"clean/input": report["input"], "clean/kept": report["kept"],
                       "clean/rejected_total": report["rejected_total"]}
            metrics |= {f"clean/rejected/{reason}": n for reason, n in report["rejected"].items()}
            run.log_metrics(metrics)
            run.log_artifact(output / "report.json")
            for figure in figures:
                run.log_artifact(figure, "plots")
            return run.run_id
    except Exception as err:  # noqa: BLE001 - never lose a finished stage over the dashboard
        log.warning("MLflow logging of the clean stage failed: %s", err)
        return None


def _input_label(path: Path) -> str:
    """A readable name for the input: `data/raw/parallel.parquet` → `parallel`, `runs/x/kept` → `x-kept`."""
    path = Path(path)
    stem = path.name.split(".")[0] or path.name
    return f"{path.parent.name}-{stem}" if stem in ("kept", "part-0", "part-00000") else stem
