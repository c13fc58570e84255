"""The back-translation job, stage by stage; every stage reconciles (input = kept + rejected by reason).

    clean            raw pairs            → mtcore.cleaning on Ray Data
    align_filter     cleaned pairs        → mtcore.alignment (built-in encoder, auto threshold)
    reverse_model    aligned pairs        → a vi→en checkpoint (given, or trained on Ray Train)
    select_mono      monolingual text     → new sentences (not dev/test or corpus targets, no repeats), at most ratio × real pairs
    backtranslate    selected sentences   → synthetic English sources (Ray Data actor pool)
    synthetic_filter synthetic pairs      → the cleaning rules that judge a pair alone, cosine (the align stage's threshold)
    assemble         real (× upsample) + synthetic pairs → OUT/augmented/, with a `synthetic` column
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtcore import checks
from mtcore.backtranslation.config import BTConfig, BTError
from mtcore.backtranslation.reverse import EXPERIMENT
from mtcore.backtranslation.stages import MARKER, Donor, StageDir, check_output, recorded_donor, remove_outputs
from mtcore.data.corpus import read_corpus, write_parquet
from mtcore.runs import write_data_pointer
from mtcore.data.ledger import StageReport, rejects_table, write_report
from mtcore.nmt.tokenizer import BT_TAG

log = logging.getLogger(__name__)
STAGES = ("clean", "align_filter", "reverse_model", "select_mono", "backtranslate", "synthetic_filter", "assemble")
# Below this dev BLEU a reverse model's back-translations are mostly noise: at 2–3 the synthetic filter rejected two
# thirds to three quarters of them; bt_effect's gains came with reverse models of 11–15 (benchmarks/RESULTS.md).
WEAK_REVERSE_BLEU = 10.0


@dataclass
class BTResult:
    output: Path
    augmented: Path
    stages: list[dict]
    reused: list[str]
    reverse_model: str
    reverse_dev_bleu: float | None
    mlflow_run_id: str | None
    elapsed_s: float


# --------------------------------------------------------------------------- inputs checked up front


MONO_COLUMNS = ("vi", "text_vi", "vi_text", "vietnamese", "sentence", "sentences")


def read_mono(path: str | Path, keep_blank: bool = False) -> pa.Table:
    """Monolingual text: Parquet (a file or a folder of them) with a `text` column, or a UTF-8 file with one
    sentence a line. Ids are `NAME:N`, N the line (row) from 1, counted before blank lines are skipped;
    the skipped lines are counted in a warning. `keep_blank`: blank lines stay rows, for `select_mono` to set aside
    with their reason (the stage's counts then reconcile with the file's lines)."""
    path = Path(path)
    if not path.exists():
        raise BTError(f"--mono: {path} not found")
    from mtcore.data.corpus import _PACKED, CorpusError, _decode_lines, as_strings, is_text_type, origin_and_id, read_parquet_files

    try:
        if path.suffix.lower() == ".parquet" or path.is_dir():
            table = read_parquet_files(path)  # every part with the same columns, or an error naming the one that differs
            if "text" not in table.column_names:
                # the sentences' column by its language's name (`vi`, `text_vi`, `sentence`), or the one string column
                named = [c for c in table.column_names if c.lower() in MONO_COLUMNS]
                strings = [f.name for f in table.schema if is_text_type(f.type) and f.name not in ("id", "origin")]
                found = named if len(named) == 1 else strings if len(strings) == 1 else []
                if not found:
                    raise BTError(f"--mono: {path} has no `text` column (columns: {table.column_names}); name the "
                                  f"Vietnamese sentences' column `text` or `vi`")
                table = table.rename_columns(["text" if c == found[0] else c for c in table.column_names])
            if not is_text_type(table.schema.field("text").type):
                raise BTError(f"--mono: {path}: column `text` must be strings, found {table.schema.field('text').type}")
            table = as_strings(table, "text")
            table = table.set_column(table.schema.get_field_index("text"), "text", pc.fill_null(table["text"], ""))
        elif path.name.lower().endswith(_PACKED):
            raise BTError(f"--mono: {path}: compressed in a format mtcore does not read (it reads .gz): decompress it, "
                          f"or recompress with gzip")
        else:
            lines = _decode_lines(path)
            tabbed = sum("\t" in line for line in lines)
            if tabbed and tabbed >= len(lines) / 2:  # src<TAB>tgt: each line would be back-translated as one "sentence"
                raise BTError(f"--mono: {path}: {tabbed} of {len(lines)} lines hold a tab, as a parallel TSV does; "
                              "monolingual text is one Vietnamese sentence a line (e.g. `cut -f2` of the TSV)")
            table = pa.table({"text": pa.array(lines, pa.string())})  # typed: an empty file has no rows to infer from
        table = origin_and_id(table, path)
    except CorpusError as err:
        raise BTError(f"--mono: {err}") from None
    n = len(table)
    nonblank = pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(table["text"])), 0)
    sentences = pc.sum(nonblank).as_py() or 0
    if sentences == 0:
        raise BTError(f"--mono: {path} holds no non-empty sentence")
    if sentences < n:
        log.warning("--mono %s: %d blank line(s) or empty row(s) %s, %d sentences read", path, n - sentences,
                    "set aside as `blank`" if keep_blank else "skipped", sentences)
    if not keep_blank:
        table = table.filter(nonblank)
    return table.select(["text", "origin", "id"])


def check_reverse_model(spec: str, mono_sample: list[str]) -> str | None:
    """A given reverse model must translate vi→en and its vocabulary must cover the monolingual text; `None` = train one."""
    if spec == "train":
        return None
    directory = resolve_model_dir(spec)
    from mtcore.nmt.checkpoint import CheckpointError, load_checkpoint

    try:
        ckpt = load_checkpoint(directory)
    except (CheckpointError, ValueError, OSError) as err:
        raise BTError(f"--reverse-model {spec}: not a usable checkpoint: {err}") from None
    if ckpt.model_cfg.direction != "vi-en":
        raise BTError(f"--reverse-model {spec} translates {ckpt.model_cfg.direction}; back-translation needs vi-en")
    pieces = [p for seq in ckpt.tokenizer.encode_pieces(mono_sample) for p in seq]
    byte_share = sum(p.startswith("<0x") for p in pieces) / max(1, len(pieces))
    if byte_share > 0.2:
        raise BTError(
            f"--reverse-model {spec}: its vocabulary does not match the monolingual text "
            f"({byte_share:.0%} of pieces of its first {len(mono_sample)} sentences fall back to bytes); it was trained on other data"
        )
    return str(directory)


def resolve_filter_models(cfg: BTConfig) -> None:
    """The encoder, and with --align-score classifier its classifier: the built-in ones are trained here on
    first use; a user's must exist (an external encoder's "how to get it" error comes now, not after an hour)."""
    from mtcore.embedding import check_encoder, resolve_encoder

    check_encoder(cfg.encoder)  # a directory that is no encoder: named now, not from inside the align stage's actors
    if cfg.encoder != "builtin" and not Path(cfg.encoder).is_dir():
        from mtcore.embedding import load_encoder

        load_encoder(cfg.encoder)
        return
    encoder = resolve_encoder(cfg.encoder)
    if cfg.align_score == "classifier":
        from mtcore.alignment.filter import FilterError, classifier_for

        try:
            classifier_for(encoder)
        except FilterError as err:
            raise BTError(f"--align-score classifier: {err}") from None


def resolve_model_dir(spec: str) -> Path:
    """A checkpoint directory (a training run's folder: its best/), or an MLflow URI (`runs:/RUN_ID`: the run's best
    checkpoint, as translate takes it; `runs:/…/translator`, `models:/NAME/VERSION`) downloaded locally."""
    if "://" in spec or spec.startswith(("runs:/", "models:/")):
        from mtcore.tracking.fetch import FetchError, download_checkpoint

        try:
            local = download_checkpoint(spec)
        except FetchError as err:  # no such run, model, version or artifact path
            raise BTError(f"--reverse-model {spec}: {err}") from None
        found = [p.parent for p in local.rglob("spm.model") if (p.parent / "config.json").is_file()]
        if not found:
            raise BTError(f"--reverse-model {spec}: no mtcore checkpoint (config.json + spm.model) inside")
        return found[0]
    from mtcore.nmt.checkpoint import checkpoint_dir

    path = checkpoint_dir(spec)
    if not path.is_dir():
        raise BTError(f"--reverse-model {spec}: directory not found (or use 'train')")
    return path


# --------------------------------------------------------------------------- stages


def stage_clean(cfg: BTConfig, stage: StageDir) -> dict:
    from mtcore.cleaning import clean_dataset, load_config

    out = stage.begin()
    result = clean_dataset(cfg.corpus, out, load_config(cfg.clean_config), overwrite=True)
    return stage.finish(_stage_summary(result.report, "clean"))


def stage_align(cfg: BTConfig, stage: StageDir, cleaned: Path) -> dict:
    from mtcore.alignment.filter import FilterConfig, filter_corpus

    out = stage.begin()
    result = filter_corpus(cleaned, out, FilterConfig(encoder=cfg.encoder, score=cfg.align_score), overwrite=True, track=False)
    return stage.finish(_stage_summary(result.report, "align_filter") | {"threshold": result.report.get("threshold")})


def stage_reverse(cfg: BTConfig, stage: StageDir, aligned: Path, given: str | None, parent_run_id: str | None) -> dict:
    out = stage.begin()
    if given is not None:
        return stage.finish({"stage": "reverse_model", "checkpoint": given, "trained": False, "dev_bleu": None})
    from mtcore.backtranslation.reverse import reverse_job
    from mtcore.distributed.ray_training import run_training, runs_storage

    # This output's own run (a resumed job continues it): named by the settings alone, it was shared by every output
    # with those settings, so another output "resumed" it, re-parented nothing, and a Ctrl-C there marked it KILLED.
    # Reuse across outputs is --reuse-from's. --overwrite trains it again rather than resume its last checkpoint.
    owner = hashlib.sha256(str(Path(cfg.output).absolute()).encode()).hexdigest()[:6]
    job = reverse_job(cfg, aligned, run_name=f"bt-reverse-vi-en-{stage.hash[:8]}-{owner}")
    if cfg.overwrite:
        shutil.rmtree(runs_storage() / job.job.run_name, ignore_errors=True)
    outcome = run_training(job, parent_run_id=parent_run_id)
    shutil.copytree(outcome.best_checkpoint, out / "checkpoint", ignore=shutil.ignore_patterns("train_state.pt"))
    if outcome.best_dev_bleu < WEAK_REVERSE_BLEU:
        log.warning("the reverse model reached dev BLEU %.2f in %d steps; back-translations of a model below %g are "
                    "mostly noise, which the synthetic filter then rejects: train it longer (--reverse-steps) or give a "
                    "stronger one (--reverse-model)", outcome.best_dev_bleu, outcome.steps, WEAK_REVERSE_BLEU)
    return stage.finish({"stage": "reverse_model", "checkpoint": str((out / "checkpoint").absolute()), "trained": True,
                         "dev_bleu": outcome.best_dev_bleu, "test_bleu": outcome.test["test/bleu"],
                         "bleu_signature": outcome.test["test/bleu_signature"], "mlflow_run_id": outcome.mlflow_run_id,
                         "steps": outcome.steps})


def stage_select(cfg: BTConfig, stage: StageDir, mono: pa.Table, aligned: Path, n_real: int) -> dict:
    """Sentences to translate: not held-out targets, not real targets, not repeats; then a seeded sample of at most
    ratio × real pairs (and `max_mono`). See `mtcore.backtranslation.select`."""
    from mtcore.backtranslation.select import select_mono

    out = stage.begin()
    budget = int(cfg.ratio * n_real)
    if cfg.max_mono:
        budget = min(budget, cfg.max_mono)
    if budget < 1:
        raise BTError(f"--ratio {cfg.ratio:g} × {n_real:,} real pairs leaves a budget of 0 sentences to back-translate; "
                      f"raise --ratio" + (" or --max-mono" if cfg.max_mono else ""))
    real_targets = read_corpus(aligned).column("tgt")
    chosen = select_mono(mono, real_targets, heldout_targets(cfg), budget, cfg.seed)
    if len(chosen.kept) == 0:
        raise BTError(f"--mono: none of its {len(mono):,} sentences is left to back-translate "
                      f"({StageReport.from_tables('select_mono', len(mono), chosen.kept, chosen.rejects).rejected}); "
                      "give text that is not already in the corpus or the dev/test sets")
    write_parquet(chosen.kept, out / "selected.parquet")
    write_parquet(chosen.rejects, out / "rejects.parquet")
    report = StageReport.from_tables("select_mono", len(mono), chosen.kept, chosen.rejects, budget=budget,
                                     eligible=chosen.eligible).reconcile()
    return stage.finish(report.to_dict())


def heldout_targets(cfg: BTConfig) -> pa.Array:
    """The targets of the held-out sets the cleaning rules' TestOverlap reads (none if the rules have no TestOverlap)."""
    from mtcore.cleaning import load_config
    from mtcore.cleaning.pipeline import stage_settings as cleaning_settings

    _, heldout = cleaning_settings(load_config(cfg.clean_config))
    columns = [read_corpus(path).column("tgt") for path in heldout.values() if Path(path).exists()]
    return pa.chunked_array([c for col in columns for c in col.chunks], pa.string()).combine_chunks()


def stage_translate(cfg: BTConfig, stage: StageDir, selected: Path, checkpoint: str) -> dict:
    from mtcore.backtranslation.translate import back_translate_table

    out = stage.begin()
    table = read_parquet_table(selected)
    t0 = time.perf_counter()
    translated = back_translate_table(table, checkpoint, cfg)
    elapsed = time.perf_counter() - t0
    write_parquet(translated, out / "translated.parquet")
    report = StageReport("backtranslate", len(table), len(translated), {}, {
        "mode": cfg.mode, "seconds": round(elapsed, 1), "sentences_per_s": round(len(table) / max(elapsed, 1e-9), 2)})
    return stage.finish(report.reconcile().to_dict())


def read_parquet_table(path: Path) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(path)


def stage_synthetic_filter(cfg: BTConfig, stage: StageDir, translated: Path, threshold: float | None) -> dict:
    """The cleaning stage's own row rules (empty, repetition, length ratio, placeholders, language, …; the
    rules file of --clean-config), then the cosine of the built-in encoder."""
    from mtcore.alignment.filter import FilterConfig, filter_table
    from mtcore.cleaning import load_config
    from mtcore.cleaning.pipeline import score_batch

    out = stage.begin()
    t = read_parquet_table(translated)
    # noised mode: the rules and the cosine judge the translation; the kept rows then take its noised copy
    judged = t["synthetic_clean"] if "synthetic_clean" in t.column_names else t["synthetic"]
    pairs = pa.table({"src": judged, "tgt": t["text"], "origin": t["origin"], "id": t["id"]})
    scored = score_batch(pairs, load_config(cfg.clean_config).for_pairs_alone())
    pairs = scored.select(["src", "tgt", "origin", "id"])  # normalised as the cleaning stage normalises
    src, tgt = pairs["src"].to_pylist(), pairs["tgt"].to_pylist()
    reasons: list[str | None] = scored["_reason"].to_pylist()
    ok = np.array([r is None for r in reasons])
    bad = np.flatnonzero(~ok)
    rule_rejects = rejects_table([src[i] for i in bad], [tgt[i] for i in bad], pairs["origin"].take(bad).to_pylist(),
                                 pairs["id"].take(bad).to_pylist(), stage="synthetic_filter", reason=[reasons[i] for i in bad])
    candidates = pairs.filter(pa.array(ok))
    if len(candidates) >= 2:
        # calibration "random": back-translations' noise is bad output, not catalog near misses; kept as before issue 21
        fcfg = (FilterConfig(encoder=cfg.encoder, score="cosine", calibration="random") if threshold is None else
                FilterConfig(encoder=cfg.encoder, score="cosine", threshold=threshold))
        kept, cos_rejects, used, _, _ = filter_table(candidates, fcfg, use_ray=False)
        cos_rejects = cos_rejects.set_column(cos_rejects.schema.get_field_index("stage"), "stage", pa.array(["synthetic_filter"] * len(cos_rejects), pa.string()))
    else:
        kept, cos_rejects, used = candidates, rule_rejects.schema.empty_table(), threshold
    rejects = pa.concat_tables([rule_rejects, cos_rejects])
    if "synthetic_clean" in t.column_names:
        noised = dict(zip(t["id"].to_pylist(), t["synthetic"].to_pylist()))
        kept = kept.set_column(0, "src", pa.array([noised[i] for i in kept["id"].to_pylist()], pa.string()))
    if cfg.tag:
        kept = kept.set_column(0, "src", pc.binary_join_element_wise(pa.array([BT_TAG] * len(kept), pa.string()), kept["src"], " "))
    write_parquet(kept, out / "kept.parquet")
    write_parquet(rejects, out / "rejects.parquet")
    report = StageReport.from_tables("synthetic_filter", len(pairs), kept, rejects, cosine_threshold=used, tagged=cfg.tag)
    if len(pairs) and len(kept) < 0.1 * len(pairs):  # the job would "succeed" with no synthetic data to add
        log.warning("the synthetic filter kept %d of %d back-translations (%s): the augmented set is nearly the real "
                    "pairs alone; a stronger reverse model (--reverse-minutes, --reverse-model) makes usable ones",
                    len(kept), len(pairs), ", ".join(f"{k} {v}" for k, v in report.rejected.items()))
    return stage.finish(report.reconcile().to_dict())


def stage_assemble(cfg: BTConfig, stage: StageDir, aligned: Path, synthetic: Path) -> dict:
    out = stage.begin()
    real = read_corpus(aligned).select(["src", "tgt", "origin", "id"])
    copies = []
    for k in range(cfg.upsample):
        ids = real["id"] if k == 0 else pc.binary_join_element_wise(real["id"], pa.array([f"up{k}"] * len(real), pa.string()), "~")
        copies.append(real.set_column(3, "id", ids))
    real_up = pa.concat_tables(copies)
    real_up = real_up.append_column("synthetic", pa.array([False] * len(real_up)))
    synth = read_parquet_table(synthetic).select(["src", "tgt", "origin", "id"])
    # `bt:` marks where a synthetic row came from: a mono file named like the corpus (a/train.parquet, b/train.parquet)
    # gave both the same ids and origins, and the set's ids were no longer unique
    bt = pa.array(["bt"] * len(synth), pa.string())  # typed: with no synthetic row, an untyped [] is null and fails
    synth = synth.set_column(2, "origin", pc.binary_join_element_wise(bt, pc.cast(synth["origin"], pa.string()), ":"))
    synth = synth.set_column(3, "id", pc.binary_join_element_wise(bt, pc.cast(synth["id"], pa.string()), ":"))
    synth = synth.append_column("synthetic", pa.array([True] * len(synth))).cast(real_up.schema)
    augmented = pa.concat_tables([real_up, synth])
    write_parquet(augmented, out / "augmented" / "part-00000.parquet")
    report = {"stage": "assemble", "real_pairs": len(real), "upsample": cfg.upsample, "real_rows": len(real_up),
              "synthetic_rows": len(synth), "rows": len(augmented),
              "synthetic_share": round(len(synth) / max(1, len(augmented)), 4)}
    if report["rows"] != report["real_rows"] + report["synthetic_rows"]:
        raise AssertionError("assemble lost rows")
    return stage.finish(report)


def _stage_summary(report: dict, name: str) -> dict:
    return {"stage": name, "input": report["input"], "kept": report["kept"], "rejected": report["rejected"],
            "rejected_total": sum(report["rejected"].values()), "reconciled": report["input"] == report["kept"] + sum(report["rejected"].values())}


# --------------------------------------------------------------------------- the job


def run_backtranslation(cfg: BTConfig) -> BTResult:
    """Run (or resume) every stage; write OUT/report.json and log the run to MLflow."""
    t0 = time.perf_counter()
    root = Path(cfg.output)
    # Everything that can be wrong is checked before the first stage runs.
    checks.output_dir(root)
    if cfg.reuse_from and not any(Path(cfg.reuse_from).glob(f"*/{MARKER}")):
        raise BTError(f"--reuse-from: {cfg.reuse_from} holds no back-translation run (no finished stage)")
    if cfg.clean_config:
        from mtcore.cleaning import load_config

        load_config(cfg.clean_config)  # its errors now, not after the first stage
    from mtcore.data.corpus import CorpusError, check_exists

    try:
        check_exists(cfg.corpus)  # a Moses prefix as the readers find it: .gz sides, Train.EN
    except CorpusError as err:
        raise BTError(f"--corpus: {err}") from None
    from mtcore.runs import recorded_languages

    recorded = recorded_languages(cfg.corpus)
    if recorded not in (None, ("en", "vi")):  # its src column would be read as English: a vi-en stage output trained en→vi backwards
        raise BTError(f"--corpus {cfg.corpus}: a {'-'.join(recorded)} stage output (its report.json says so); the main "
                      f"job reads en-vi pairs (English source, Vietnamese target) to back-translate Vietnamese: pass "
                      f"the raw corpus, or one cleaned as en-vi")
    checks.output_apart(root, {"--corpus": cfg.corpus, "--mono": cfg.mono})
    mono = read_mono(cfg.mono, keep_blank=True)
    given = check_reverse_model(cfg.reverse_model, [t for t in mono["text"].slice(0, 400).to_pylist() if t.strip()][:200])
    resolve_filter_models(cfg)
    # The stages' settings count the encoder (and classifier) by their contents, so they exist by now.
    settings = cfg.stage_settings(reverse_dir=given)
    stages = {name: StageDir(root, f"{i + 1:02d}_{name}", settings[name]) for i, name in enumerate(STAGES)}
    check_output(list(stages.values()), cfg.overwrite)
    # assemble is never borrowed: it is cheap, and OUT/_data.json points at this run's own augmented set
    donor = Donor(cfg.reuse_from or recorded_donor(root), stages, settings, borrowable=STAGES[:-1])
    if stale := donor.drop_stale(root, list(stages.values())):
        log.warning("%s: the stages this run took from another run have changed since; made again: %s", root, stale)

    if cfg.overwrite:  # the stages are made again, maybe with other settings: a new MLflow run, not the old one's
        (root / "_mlflow_run.json").unlink(missing_ok=True)
    tracked = _open_run(cfg)
    run_id = tracked.run_id if tracked is not None else None
    reused, reports = [], {}

    def run(name, fn, *args):
        stage = stages[name]
        if stage.done:
            reused.append(name)
            reports[name] = stage.report()
        elif donor.offers(name):
            if stage.path.exists():  # an unfinished leftover of this run's own
                shutil.rmtree(stage.path)
            taken = donor.take(name)
            log.info("stage %s: using %s (same settings)", name, taken.path)
            reused.append(name)
            reports[name] = {**taken.report(), "reused_from": str(taken.path)}
            if name == "reverse_model" and reports[name].get("trained"):  # older runs wrote it relative to their cwd
                reports[name]["checkpoint"] = str(taken.path / "checkpoint")
            return taken.path
        else:
            log.info("stage %s", name)
            reports[name] = fn(cfg, stage, *args)
        return stage.path

    try:
        cleaned = run("clean", stage_clean) / "kept"
        aligned = run("align_filter", stage_align, cleaned) / "kept"
        reverse = run("reverse_model", stage_reverse, aligned, given, run_id)
        # Where the model is now: this run's own copy, or the one given now. The stage's report holds the path of
        # when it was made, which a moved output folder or model no longer has.
        checkpoint = str(reverse / "checkpoint") if reports["reverse_model"].get("trained") else given
        if checkpoint is None or not Path(checkpoint).is_dir():
            raise BTError(f"reverse model: {checkpoint or reverse} is gone; pass --reverse-model, or --overwrite to "
                          f"train it again")
        reports["reverse_model"]["checkpoint"] = checkpoint
        n_real = reports["align_filter"]["kept"]
        selected = run("select_mono", stage_select, mono, aligned, n_real) / "selected.parquet"
        translated = run("backtranslate", stage_translate, selected, checkpoint) / "translated.parquet"
        threshold = reports["align_filter"].get("threshold") if cfg.align_score == "cosine" else None
        synthetic = run("synthetic_filter", stage_synthetic_filter, translated, threshold) / "kept.parquet"
        if not stages["assemble"].done:
            remove_outputs(root)  # another augmented set is coming: the last one's exports and pointer go now
        assembled = run("assemble", stage_assemble, aligned, synthetic) / "augmented"
    except BaseException as err:
        with contextlib.suppress(Exception):  # a rerun without --reuse-from takes the stages borrowed so far again
            donor.write_record(root)
        if tracked is not None:
            with contextlib.suppress(Exception):  # the stage's error is the one to report
                tracked.end("KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED")
        raise

    if cfg.reuse_from and not donor.used:
        log.warning("--reuse-from %s: no stage of it was made with this run's settings; nothing taken", cfg.reuse_from)
    donor.write_record(root)
    stage_list = [reports[n] for n in STAGES]
    _write_job_report(root, cfg, stage_list, reused)
    write_data_pointer(root, assembled, stages["assemble"].hash, run_id)
    elapsed = time.perf_counter() - t0
    _log_run(tracked, cfg, reports, root, synthetic, elapsed)
    return BTResult(root, assembled, stage_list, reused, checkpoint, reports["reverse_model"].get("dev_bleu"), run_id, elapsed)


def _write_job_report(root: Path, cfg: BTConfig, stage_list: list[dict], reused: list[str]) -> None:
    # each stage's own figures too (the align threshold, the synthetic filter's cosine threshold, the selection's
    # budget, the translation speed): they were in the stages' markers only
    counts = ("stage", "input", "kept", "rejected", "rejected_total", "reconciled")
    reconciled = [StageReport(s["stage"], s["input"], s["kept"], s.get("rejected", {}),
                              {k: v for k, v in s.items() if k not in counts}) for s in stage_list if "input" in s]
    write_report(root / "report.json", reconciled, settings=dataclasses.asdict(cfg), reused_stages=reused,
                 reverse_model={k: v for k, v in stage_list[2].items() if k != "stage"}, assemble=stage_list[-1])


def _open_run(cfg: BTConfig):
    """The output folder's own MLflow run (a `TrackedRun`, or None when MLflow cannot be used)."""
    try:
        from mtcore import tracking
        from mtcore.tracking.run import open_run_with_pointer

        name = f"bt-{cfg.mode}-{'tagged' if cfg.tag else 'untagged'}-r{cfg.ratio:g}-{Path(cfg.output).name}"
        return open_run_with_pointer(EXPERIMENT, name, Path(cfg.output) / "_mlflow_run.json",
                                     tags=tracking.standard_tags("pipelines/backtranslate.py", cfg.corpus),
                                     params=tracking.flatten(dataclasses.asdict(cfg)))
    except Exception as err:  # noqa: BLE001 - the data job must not die for the dashboard
        log.warning("MLflow unavailable, the run is not tracked: %s", err)
        return None


def _log_run(run, cfg: BTConfig, reports: dict, root: Path, synthetic: Path, elapsed: float) -> None:
    if run is None:
        return
    try:
        metrics = {"elapsed_s": elapsed}
        for name, r in reports.items():
            for key in ("input", "kept", "rejected_total", "sentences_per_s", "rows", "synthetic_rows", "real_rows"):
                if isinstance(r.get(key), (int, float)):
                    metrics[f"{name}/{key}"] = float(r[key])
        if reports["reverse_model"].get("dev_bleu") is not None:
            metrics["reverse/dev_bleu"] = float(reports["reverse_model"]["dev_bleu"])
        run.log_metrics(metrics)
        run.log_artifact(root / "report.json")
        sample = read_parquet_table(synthetic).slice(0, 50)
        run.log_table({"synthetic_source": sample["src"].to_pylist(), "vietnamese": sample["tgt"].to_pylist()},
                      "samples/synthetic_pairs.json")
        run.end("FINISHED")
    except Exception as err:  # noqa: BLE001
        log.warning("MLflow logging failed: %s", err)


def stage_table(result: BTResult) -> str:
    """The printed summary: one line per stage, counts in and out and the main reasons."""
    names = {r["stage"]: r["stage"] + (" (reused)" if r["stage"] in result.reused else "") for r in result.stages}
    w = max([18, *(len(n) + 1 for n in names.values())])  # "synthetic_filter (reused)" ran into its counts
    lines = [f"{'stage':<{w}}{'in':>9}{'out':>9}  rejected by reason", "-" * (w + 60)]
    for r in result.stages:
        name = names[r["stage"]]
        if "input" in r:
            ranked = sorted(r.get("rejected", {}).items(), key=lambda kv: -kv[1])
            reasons = ", ".join(f"{k} {v:,}" for k, v in ranked[:4])
            if len(ranked) > 4:  # the row's rejects add up: 8 were shown of 9 (report.json holds every reason)
                reasons += f", {len(ranked) - 4} more reason(s) {sum(v for _, v in ranked[4:]):,}"
            lines.append(f"{name:<{w}}{r['input']:>9,}{r['kept']:>9,}  {reasons}")
        elif r["stage"] == "reverse_model":
            bleu = f"dev BLEU {r['dev_bleu']:.2f}" if r.get("dev_bleu") is not None else "given"
            lines.append(f"{name:<{w}}{'':>9}{'':>9}  {bleu}  {r['checkpoint']}")
        else:
            lines.append(f"{name:<{w}}{r['real_rows']:>9,}{r['rows']:>9,}  real×{r['upsample']} + {r['synthetic_rows']:,} synthetic ({r['synthetic_share']:.1%})")
    return "\n".join(lines)
