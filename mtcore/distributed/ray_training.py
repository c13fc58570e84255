"""DDP training on Ray Train (the V2 API): the per-worker function, the driver, and the end-of-run report.

Three pieces, kept apart (as in Ray's own examples):
- `prepare_inputs` (driver, before any worker starts): resolve the training corpus
  (cleaning it on first use), train the joint SentencePiece model once, open or
  reuse the MLflow run named after the settings;
- `train_worker` (each Ray Train worker): plain PyTorch `mtcore.nmt.training.fit`, with
  callbacks that report to Ray Train on every rank, checkpoint from rank 0 and log
  step/validation metrics to MLflow from rank 0 only;
- `run_training` (driver): builds `ScalingConfig`/`RunConfig`, fits, then evaluates
  the best checkpoint on the test set and logs artifacts (checkpoint, tokenizer,
  config, sample translations, attention heatmaps, curves, a pyfunc model).

A rerun with the same run name resumes from the latest checkpoint (Ray Train V2
restores a run from the same `storage_path` + `name`); a worker that dies is
replaced and the run continues from the last checkpoint (`FailureConfig`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mtcore.config import ConfigError
from mtcore.errors import Interrupted, MtcoreError, one_line
from mtcore.distributed.jobs import TrainingJob
from mtcore.distributed.progress import PROGRESS_FILE, ProgressFile, follow_progress
from mtcore.data.paths import RAW_PARALLEL, embedded_heldout
from mtcore.hardware import training_precision
from mtcore.runs import home

log = logging.getLogger(__name__)

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")  # the default since Ray 2.51; explicit for older clusters


class JobError(MtcoreError, RuntimeError):
    """A training job that cannot start or did not finish; the message says why."""


# --------------------------------------------------------------------------- driver: inputs


@dataclass(frozen=True)
class PreparedInputs:
    train_data: str
    dev_data: str
    test_data: str
    spm_model: str
    tracking_uri: str
    mlflow_run_id: str
    run_name: str
    storage_path: str
    # The run finished before with these settings and test settings: nothing is opened, trained or tested again.
    finished: bool = False
    encoded: str = ""  # the training pairs encoded once (mtcore.nmt.encoded), which every worker memory-maps

    @property
    def run(self):
        from mtcore.tracking.run import TrackedRun

        return TrackedRun(self.tracking_uri, self.mlflow_run_id)


def columns_of(job: TrainingJob, path: str | Path | None = None) -> tuple[str, str]:
    """The languages of a corpus's src and tgt columns (what PREFIX.xx files a Moses-style corpus has):
    `job.corpus_langs`, else those the cleaning stage recorded for `path` (`clean --langs vi-en`: a vi→en model
    was trained the wrong way round on it, read as the en-vi default), else `corpus_languages`."""
    from mtcore.nmt.training import corpus_languages
    from mtcore.runs import recorded_languages

    if not job.job.corpus_langs and path is not None:
        recorded = recorded_languages(path)
        model = {job.run.model.src_lang, job.run.model.tgt_lang}
        if recorded is not None and set(recorded) == model:
            return recorded
        if recorded is not None:  # an en-de stage output read as en-vi trained a model on it without a word
            s, t = recorded
            raise JobError(f"{path} holds {s}-{t} pairs (its stage's --langs) and the model is "
                           f"{job.run.model.direction}; train {s}-{t} with model.src_lang={s} model.tgt_lang={t} and "
                           f"{s}-{t} job.dev_data= and job.test_data= (or job.corpus_langs= if the record is wrong)")
    return corpus_languages(job.run.model, job.job.corpus_langs)


def runs_storage() -> Path:
    """Where Ray Train keeps each training run's checkpoints, a folder per run name."""
    return home() / "ray_train"


def resolve_train_data(job: TrainingJob) -> str:
    """The configured corpus, or the embedded corpus cleaned by the cleaning stage (run once, reused)."""
    if job.job.train_data:
        from mtcore.data.corpus import CorpusError, check_exists
        from mtcore.runs import resolve_data

        path, _ = resolve_data(job.job.train_data)  # runs/backtranslate → its assembled set
        langs = columns_of(job, path)  # a stage output of another pair is refused here, before any work
        try:
            check_exists(path, *langs)
        except CorpusError as err:
            raise JobError(f"job.train_data: {err}") from None
        return str(path.absolute())  # workers do not share the driver's working directory
    from mtcore.cleaning import clean_dataset

    from mtcore.runs import StageError

    # Its own stage, not `runs/clean`, which `pipelines/clean.py` may have filled with another corpus.
    # mtcore owns it: made with other rules or code (an upgrade), it is made again, not refused.
    if not (home() / "clean-embedded" / "report.json").is_file():  # a minute on 2 cores: say what the Ray Data line is
        log.info("cleaning the embedded corpus into %s (once; later runs reuse it)", home() / "clean-embedded")
    try:
        result = clean_dataset(RAW_PARALLEL, home() / "clean-embedded")
    except StageError as err:
        log.warning("cleaning the embedded corpus again in %s: it was made with other settings or inputs (%s)",
                    home() / "clean-embedded", err.changed)
        result = clean_dataset(RAW_PARALLEL, home() / "clean-embedded", overwrite=True)
    if result.skipped:
        log.info("reusing the cleaned embedded corpus in %s", result.output)
    else:
        log.info("cleaned the embedded corpus: %s of %s pairs kept", f"{result.report['kept']:,}", f"{result.report['input']:,}")
    return str(result.output / "kept")


def load_pairs(path: str, job: TrainingJob, limit: int = 0, *, spread: bool = False) -> list[tuple[str, str]]:
    """The pairs of `path` in the job's direction; with `limit`, the first `limit` (training data: its real rows
    come first) or, `spread`, `limit` rows spread over the set (a test set: `evenly_spaced`)."""
    from mtcore.data.corpus import read_corpus
    from mtcore.nmt.metrics import evenly_spaced
    from mtcore.nmt.training import oriented_pairs

    langs = columns_of(job, path)
    table = read_corpus(path, src_lang=langs[0], tgt_lang=langs[1])  # a PREFIX is PREFIX.de + PREFIX.en for de-en
    check_synthetic_side(table, path, job, langs, limit)
    if limit and spread:
        table = table.take(evenly_spaced(len(table), limit))
    elif limit:
        table = table.slice(0, limit)
    return oriented_pairs(table, job.run.model, langs)


def check_synthetic_side(table, path: str, job: TrainingJob, langs: tuple[str, str], limit: int) -> None:
    """An augmented set's synthetic rows have a machine-made source (a back-translation): fine for the direction it
    was made for, wrong as the target of the other (a vi→en model learned to write noised `<bt>` English). And a
    `job.train_limit` takes its first rows, which are the real ones: said, not silent."""
    import pyarrow.compute as pc

    if "synthetic" not in table.column_names:
        return
    synthetic = int(pc.sum(pc.cast(table["synthetic"], "int64")).as_py() or 0)
    if synthetic and (job.run.model.src_lang, job.run.model.tgt_lang) == (langs[1], langs[0]):
        raise ConfigError(f"{path}: its {synthetic:,} synthetic pairs have machine-made {langs[0]} sides "
                          f"(back-translations into {langs[0]}); a {job.run.model.direction} model would learn to write "
                          f"them. Train {job.run.model.direction} on the real pairs (the job's 02_align_filter/kept), or "
                          f"{langs[0]}→{langs[1]} on this set")
    if synthetic and limit and limit < len(table):
        first_synthetic = int(pc.index(table["synthetic"], True).as_py())
        if first_synthetic >= limit:
            log.warning("%s: job.train_limit=%d takes the first rows, all real: none of its %s synthetic pairs is "
                        "trained on", path, limit, f"{synthetic:,}")


DUPLICATE_SHARE = 0.05  # exact repeats above this share of the training pairs are worth a warning


def warn_leaks_and_repeats(job: TrainingJob, train_data: str) -> None:
    """Training pairs whose source is a dev or test source (the test BLEU is then partly memory), a corpus much of
    which repeats itself, and a training, dev or test side in another language than the job's (`warn_other_languages`):
    said, with what to do. The embedded job's cleaned corpus and held-out sets have none of these."""
    import pyarrow.compute as pc

    from mtcore.data.corpus import read_corpus

    def sources(path: str):
        langs = columns_of(job, path)
        return read_corpus(path, src_lang=langs[0], tgt_lang=langs[1])

    table = sources(train_data)
    if job.job.train_limit:
        table = table.slice(0, job.job.train_limit)
    warn_other_languages("job.train_data", train_data, table, columns_of(job, train_data))
    trained = pc.utf8_trim_whitespace(table["src"])
    for label, path in (("test", job.job.test_data), ("dev", job.job.dev_data)):
        held_table = sources(path)
        warn_other_languages(f"job.{label}_data", path, held_table, columns_of(job, path))
        held = pc.unique(pc.utf8_trim_whitespace(held_table["src"]))
        leaked = pc.filter(held, pc.is_in(held, value_set=trained))
        if len(leaked):
            fix = ("its test_overlap rule drops them" if embedded_heldout(path) else  # the default rules know these two
                   f"with --config RULES.yaml whose rule `TestOverlap: {{paths: [{path}]}}` names this set")
            log.warning("%s of the %s %s sources (%.1f %%) are also training sources, e.g. %r: %s BLEU is then partly "
                        "memory; clean the training corpus with pipelines/clean.py (%s)",
                        f"{len(leaked):,}", f"{len(held):,}", label, 100 * len(leaked) / len(held), leaked[0].as_py()[:60],
                        label, fix)
    if "synthetic" in table.column_names:  # an augmented set repeats its real pairs on purpose (its `upsample`)
        return
    repeats = len(table) - pc.count_distinct(pc.binary_join_element_wise(table["src"], table["tgt"], "\t")).as_py()
    if repeats > DUPLICATE_SHARE * len(table):
        log.warning("%s of the %s training pairs (%.0f %%) repeat another pair exactly: they weigh those pairs up and "
                    "the epochs down; pipelines/clean.py drops them (its duplicate rule)", f"{repeats:,}",
                    f"{len(table):,}", 100 * repeats / len(table))


LANGUAGE_SAMPLE = 2000  # rows read for the language check, spread over the file


def warn_other_languages(label: str, path: str, table, langs: tuple[str, str]) -> None:
    """A side that reads as another language than the job gives it (an en-de corpus trained, or a dev set scored, as
    en-vi: it ran to the end and logged its BLEU without a word). Said, not refused, as `mtcore.evaluate` says it of a
    test set: py3langid can misjudge a corpus of short labels, and the user may know better."""
    from mtcore.data.langid import other_language
    from mtcore.nmt.metrics import evenly_spaced

    sample = table.take(evenly_spaced(len(table), LANGUAGE_SAMPLE)) if len(table) > LANGUAGE_SAMPLE else table
    for column, lang in zip(("src", "tgt"), langs):
        if other := other_language([t or "" for t in sample[column].to_pylist()], lang):
            log.warning("%s %s: its %s column, %s for this job, reads as %s: a corpus of another pair? Train that pair "
                        "with model.src_lang= model.tgt_lang= (and its own dev and test sets), or set job.corpus_langs= "
                        "if the columns stand the other way round", label, path, column, lang, other)


def tokenizer_for(train_data: str, job: TrainingJob) -> Path:
    """Train the joint SentencePiece model once per (corpus, size); later runs reuse it."""
    from mtcore.data.corpus import read_corpus
    from mtcore.nmt.tokenizer import train_tokenizer
    from mtcore.runs import code_version
    from mtcore.tracking import data_version

    # the tokenizer's code too: its reserved symbols and normalisation are part of the model it trains
    # and the columns it reads: PREFIX.de + PREFIX.en and PREFIX.en + PREFIX.vi of one prefix are two corpora
    langs = columns_of(job, train_data)
    coverage = f"-c{job.job.character_coverage:g}" if job.job.character_coverage != 1.0 else ""
    key = (f"{data_version(train_data)}-{'-'.join(langs)}-{job.job.train_limit}-{job.job.vocab_size}{coverage}-"
           f"{code_version('mtcore.nmt.tokenizer')[:8]}")
    path = home() / "tokenizers" / key / "spm.model"
    if not path.is_file():
        table = read_corpus(train_data, src_lang=langs[0], tgt_lang=langs[1])
        if job.job.train_limit:
            table = table.slice(0, job.job.train_limit)
        texts = tokenizer_texts(table)
        train_tokenizer(texts, path, vocab_size=job.job.vocab_size, character_coverage=job.job.character_coverage)
    return path


def tokenizer_texts(table, max_sentences: int | None = None) -> list[str]:
    """Both sides of the corpus's pairs, as the tokenizer trains on them: of a corpus of more than half
    `max_sentences` pairs, a seeded sample of pairs, drawn before any becomes a Python string (20M of them at 10M
    pairs, to be normalised and then sampled down to 2M)."""
    import numpy as np

    from mtcore.nmt.tokenizer import MAX_SENTENCES

    limit = (max_sentences or MAX_SENTENCES) // 2
    if table.num_rows > limit:
        table = table.take(np.sort(np.random.default_rng(0).choice(table.num_rows, limit, replace=False)))
    return table.column("src").to_pylist() + table.column("tgt").to_pylist()


# The command behind each experiment that trains through here: the `mtcore.entry_point` tag.
ENTRY_POINTS = {
    "train_transformer": "experiments/train_transformer.py",
    "tune_transformer": "experiments/tune_transformer.py",
    "backtranslate": "pipelines/backtranslate.py",
    "bt_effect": "experiments/bt_effect.py",
}


def data_lineage_tags(train_data: str) -> dict[str, str]:
    """`mtcore.data_*` tags: the data job that made the corpus (its fingerprint, MLflow run, stage), where it was one."""
    from mtcore.runs import resolve_data

    _, lineage = resolve_data(train_data)
    return {f"mtcore.data_{k}": str(v) for k, v in lineage.items() if v}


def open_mlflow_run(job: TrainingJob, run_name: str, train_data: str, parent_run_id: str | None = None,
                    data_version: str = "", lineage: dict[str, str] | None = None, fresh: bool = False):
    """The job's MLflow run (a `TrackedRun`): the existing run of that name is continued, so a resumed job logs to
    one run; a `fresh` one (no checkpoint to resume from) gets a new run where the old one holds metrics. With
    `parent_run_id` (a Tune search), the run is that run's child."""
    from mtcore import tracking
    from mtcore.tracking.run import open_run

    entry_point = ENTRY_POINTS.get(job.job.experiment, job.job.experiment)
    model = job.run.model
    tags = tracking.standard_tags(entry_point, train_data, arch=model.arch, direction=model.direction) | {
        "mtcore.fingerprint": job.fingerprint(data_version)
    }
    if lineage is not None:  # a search's trials: read from the data as the user named it, before it was resolved
        tags |= lineage
    elif job.job.train_data:  # lineage: the data job that made the corpus, where it was one
        tags |= data_lineage_tags(job.job.train_data)
    return open_run(job.job.experiment, run_name, tags=tags, params=tracking.flatten(job.to_dict()),
                    parent=parent_run_id, continue_named=True, fresh=fresh)


def user_error_of(err: BaseException) -> BaseException | None:
    """The user error (bad file, setting) a worker raised, inside Ray Train's WorkerGroupError; None for a bug."""
    from mtcore.errors import is_user_error

    for failure in (getattr(err, "worker_failures", None) or {}).values():
        failure = getattr(failure, "cause", None) or failure
        if is_user_error(failure):
            return failure
    return None


def check_heldout_data(job: TrainingJob, read: bool = False) -> None:
    """The dev and test sets exist (`read`: and read whole, so a damaged line or a wrong format is said before
    training, not after it)."""
    from mtcore.data.corpus import CorpusError, check_exists

    for label, path in (("job.dev_data", job.job.dev_data), ("job.test_data", job.job.test_data)):
        try:
            check_exists(path, *columns_of(job, path))
        except CorpusError as err:
            raise JobError(f"{label}: {err}") from None
        if read:
            load_pairs(path, job)


def prepare_inputs(job: TrainingJob, parent_run_id: str | None = None,
                   scaling: tuple[int, bool] | None = None) -> PreparedInputs:
    """The run's data, tokenizer, name and MLflow run, checked against what an earlier run of that name was made
    with. `scaling`: the (workers, use_gpu) it will train on, which a resumed run must keep."""
    check_heldout_data(job, read=True)
    from mtcore.tracking import data_version

    train_data = resolve_train_data(job)
    spm = tokenizer_for(train_data, job)
    version = data_version(train_data)  # the same path with other contents (a rerun data job) is another run
    run_name = job.run_name(version)
    storage = runs_storage()
    done = _finished_before(storage / run_name)
    _check_same_settings(storage / run_name, job, version, None if done else scaling)
    if done is None or done[1] not in (None, tested_with(job)):  # trained, or tested again on another test set
        warn_leaks_and_repeats(job, train_data)
    dev, test = (str(Path(p).absolute()) for p in (job.job.dev_data, job.job.test_data))
    if done is not None and done[1] in (None, tested_with(job)):  # its MLflow run as it is: no empty run beside it
        from mtcore.tracking import tracking_uri

        return PreparedInputs(train_data, dev, test, str(spm.absolute()), tracking_uri(), done[0].mlflow_run_id, run_name,
                              str(storage.absolute()), finished=True)
    # Training starts afresh where no checkpoint is left (the run folder deleted, as a finished run's message says
    # to retrain it, or --overwrite): a new MLflow run, or the old run's points up to its last step hid the new ones.
    resumes = done is not None or any((storage / run_name).glob("checkpoint_*"))
    run = open_mlflow_run(job, run_name, train_data, parent_run_id, version, fresh=not resumes)
    # a finished run tested again on another test set trains nothing: nothing to encode
    encoded = "" if done is not None else str(encoded_training_pairs(train_data, job, spm).absolute())
    return PreparedInputs(train_data, dev, test, str(spm.absolute()), run.uri, run.run_id, run_name, str(storage.absolute()),
                          encoded=encoded)


def encoded_training_pairs(train_data: str, job: TrainingJob, spm: Path) -> Path:
    """The training pairs in the model's direction, encoded by the run's tokenizer once (beside it: its folder's
    name holds the data version, columns, train_limit and vocabulary) for every worker to memory-map."""
    import hashlib

    import sentencepiece

    from mtcore.nmt.encoded import is_encoded, write_encoded
    from mtcore.nmt.tokenizer import Tokenizer
    from mtcore.runs import code_version

    model = job.run.model
    # What the ids depend on beyond the tokenizer folder's name (data version, columns, train_limit, vocabulary):
    # the model file itself (deleted and retrained in place), SentencePiece's version, and the code that reads,
    # orients and encodes the pairs.
    key = hashlib.sha256(spm.read_bytes() + sentencepiece.__version__.encode() + code_version(
        "mtcore.nmt.encoded", "mtcore.data.corpus", "mtcore.nmt.training", "mtcore.distributed.ray_training").encode())
    directory = spm.parent / f"encoded-{model.src_lang}-{model.tgt_lang}-{key.hexdigest()[:12]}"
    if is_encoded(directory):  # what reading the pairs would have said (rank 0 said it on every run before)
        langs = columns_of(job, train_data)
        check_synthetic_side(_synthetic_column(train_data, langs), train_data, job, langs, job.job.train_limit)
        return directory
    from mtcore.console import progress_line

    pairs = load_pairs(train_data, job, job.job.train_limit)
    progress_line(f"encoding {len(pairs):,} training pairs once, for every worker")
    return write_encoded(pairs, Tokenizer(spm), directory)


def _synthetic_column(train_data: str, langs: tuple[str, str]):
    """All `check_synthetic_side` reads: a Parquet corpus's `synthetic` column alone (the back-translation job's
    augmented set), not its texts, which a cached encoding does not need; other inputs are read whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mtcore.data.corpus import read_corpus
    from mtcore.runs import input_files

    files = input_files(train_data, langs)
    if files and all(f.suffix == ".parquet" for f in files):
        has = [("synthetic" in pq.read_schema(f).names) for f in files]
        if not any(has):
            return pa.table({})
        if all(has):
            return pa.concat_tables(pq.read_table(f, columns=["synthetic"]) for f in files)
    return read_corpus(train_data, src_lang=langs[0], tgt_lang=langs[1])


TEST_KEYS = {"test": "job.test_data", "limit": "job.test_limit", "beam": "job.test_beam"}


def tested_with(job: TrainingJob) -> dict[str, Any]:
    """What a finished run's test figures depend on besides the model: the test set's contents, limit and beam."""
    from mtcore.runs import content_hash, input_files

    path = Path(job.job.test_data)
    return {"test": content_hash(path) if input_files(path) else str(path), "limit": job.job.test_limit,
            "beam": job.job.test_beam}


def _changed(old: dict, new: dict) -> dict[str, str]:
    """{`train.max_steps`: `400 → 450`, …}: what differs between two job dicts (a run's refusal named two hashes).
    Of the job's paths only the dev set's counts (the training data count by content, and name themselves)."""
    return {f"{section}.{key}": f"{old.get(section, {}).get(key)!r} → {value!r}"
            for section, values in new.items() if isinstance(values, dict)
            for key, value in values.items() if old.get(section, {}).get(key) != value
            and (section != "job" or key in TrainingJob.TRAINED_JOB_KEYS + ("dev_data",))}


def _changed_keys(old: dict, new: dict, limit: int = 4) -> str:
    diffs = [f"{key}: {change}" for key, change in _changed(old, new).items()]
    return ", ".join(diffs[:limit]) + (f" and {len(diffs) - limit} more" if len(diffs) > limit else "")


def _as_before(job: TrainingJob, old: dict) -> TrainingJob:
    """`job` with the workers and GPU setting an earlier run of its name recorded (which resolved to the same)."""
    was = (old.get("config") or {}).get("job", {})
    return dataclasses.replace(job, job=dataclasses.replace(job.job, workers=was.get("workers", job.job.workers),
                                                            use_gpu=was.get("use_gpu", job.job.use_gpu)))


def _workers(scaling: tuple[int, bool]) -> str:
    return f"{scaling[0]} {'GPU' if scaling[1] else 'CPU'} worker(s)"


def _check_same_settings(run_dir: Path, job: TrainingJob, data_version: str, scaling: tuple[int, bool] | None = None) -> None:
    """Resuming a run name with other settings or other training data would silently mix two experiments: refuse.
    So would resuming on other workers (`scaling`): a step's batch is workers × train.max_tokens, and the shards
    change mid-epoch; or in another precision than the run started in (`train.bf16` is a wish; the hardware
    decides). `job.workers`/`job.use_gpu` that name the workers the run had are the same settings."""
    marker = run_dir / "mtcore-fingerprint.json"
    now = job.fingerprint(data_version)
    precision = training_precision(scaling[1], job.run.train.bf16) if scaling is not None else None
    if marker.is_file():
        old = json.loads(marker.read_text())
        had = tuple(old["scaling"]) if old.get("scaling") else None
        changed = _changed(old.get("config") or {}, job.to_dict())
        same_workers = scaling is not None and had == tuple(scaling) and _as_before(job, old).fingerprint(data_version) == old["fingerprint"]
        if old["fingerprint"] != now and not same_workers:
            was = old.get("data_version")
            what = (f"other training data (data version {was} != {data_version})" if was and was != data_version
                    else f"other settings ({_changed_keys(old.get('config') or {}, job.to_dict())})" if changed
                    else f"other dev data or settings (fingerprint {old['fingerprint']} != {now})")
            raise JobError(f"run '{run_dir.name}' exists with {what}; pick another job.run_name or delete {run_dir}")
        if scaling is not None and had is not None and had != tuple(scaling):
            raise JobError(f"run '{run_dir.name}' was trained by {_workers(had)} and would resume on {_workers(scaling)}: "
                           f"a step's batch (workers × train.max_tokens) and each worker's share of the data would change "
                           f"mid-run; resume it where {_workers(had)} are free (--workers {had[0]}), or pick another "
                           f"job.run_name")
        if precision is not None and old.get("precision", precision) != precision:
            raise JobError(f"run '{run_dir.name}' trained in {old['precision']} and would resume in {precision} on this "
                           f"hardware (train.bf16={job.run.train.bf16}); resume it where it trained, or pick another "
                           f"job.run_name")
        if scaling is not None and (had is None or "precision" not in old):  # a run from before these were recorded
            marker.write_text(json.dumps(old | {"scaling": list(scaling), "precision": precision}, indent=2))
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"fingerprint": now, "data_version": data_version, "config": job.to_dict()}
                                     | ({"scaling": list(scaling), "precision": precision} if scaling else {}), indent=2))


# --------------------------------------------------------------------------- worker


class ProgressLog(ProgressFile):
    """A training run's step and validation lines."""

    def step(self, m: dict[str, float]) -> None:
        self.write(f"step {int(m['step']):>6}  epoch {int(m['epoch'])}  loss {m['train/loss']:.3f}  "
                   f"lr {m['train/lr']:.2e}  {m['train/tokens_per_s']:,.0f} tok/s  {self.clock()}")

    def validation(self, m: dict[str, float], best: dict[str, float], best_metric: str = "bleu") -> None:
        """One line per validation; "(best …)" follows the metric that picks the checkpoint."""
        what = f"average of the last {int(m['averaged'])} snapshots: " if "averaged" in m else ""
        bleu_best = f" (best {best['dev/bleu']:.2f})" if best_metric == "bleu" else ""
        loss_best = f" (best {best['dev/loss']:.3f})" if best_metric == "loss" else ""
        self.write(f"step {int(m['step']):>6}  {what}dev BLEU {m['dev/bleu']:.2f}{bleu_best}  "
                   f"dev loss {m['dev/loss']:.3f}{loss_best}  {self.clock()}")


class ProgressWarnings(logging.Handler):
    """A worker's warnings (pairs skipped, a checkpoint that cannot be resumed) as progress lines: a worker's
    own log goes to Ray's files, which the user does not read."""

    def __init__(self, progress: ProgressLog):
        super().__init__(logging.WARNING)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        self.progress.write(f"warning: {record.getMessage()}")


USER_ERROR_FILE = "mtcore-user-error.json"  # a worker's setting or data error, for the retries of the same fit


def train_worker(config: dict[str, Any]) -> None:
    """The per-worker function Ray Train runs on every rank. An error in the user's data or settings (a
    `MtcoreError`) fails every retry the same way: the first says it in a file that the retries of the same
    `fit()` (its `attempt`) raise again at once, instead of reading and encoding the corpus again for nothing."""
    marker = Path(config["inputs"]["storage_path"]) / config["inputs"]["run_name"] / USER_ERROR_FILE
    with contextlib.suppress(OSError, ValueError, KeyError):
        seen = json.loads(marker.read_text(encoding="utf-8"))
        if seen["attempt"] == config.get("attempt"):
            raise RepeatedUserError(seen["message"])
    try:
        _train_worker(config)
    except MtcoreError as err:
        with contextlib.suppress(OSError):
            marker.write_text(json.dumps({"attempt": config.get("attempt"), "message": one_line(err)}), encoding="utf-8")
        raise


class RepeatedUserError(JobError):
    """The error an earlier try of this fit met in the same data and settings."""


def _train_worker(config: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch

    from mtcore.nmt.checkpoint import CheckpointError, check_tokenizer, load_resume_state, read_meta, save_checkpoint
    from mtcore.config import RunConfig
    from mtcore.nmt.encoded import EncodedPairs
    from mtcore.nmt.tokenizer import Tokenizer
    from mtcore.nmt.training import fit
    from mtcore.tracking.run import SafeLogger

    job = TrainingJob.from_dict(config["job_config"])
    inputs = PreparedInputs(**config["inputs"])
    run_cfg: RunConfig = job.run
    rank = ray.train.get_context().get_world_rank()
    device = ray.train.torch.get_device()
    tokenizer = Tokenizer(inputs.spm_model)
    train_pairs = EncodedPairs(inputs.encoded) if inputs.encoded else load_pairs(inputs.train_data, job, job.job.train_limit)
    dev_pairs = load_pairs(inputs.dev_data, job)
    mlflow_log = SafeLogger(inputs.run if rank == 0 else None)
    mlflow_log.resumed()  # a retry or a resumed run replays steps its run holds already: each point is logged once

    progress = ProgressLog(Path(inputs.storage_path) / inputs.run_name / PROGRESS_FILE, run_cfg.train.time_budget_min,
                           enabled=rank == 0)
    if rank == 0:
        logging.getLogger("mtcore").addHandler(ProgressWarnings(progress))
        how = "memory-mapped, encoded once" if inputs.encoded else "read and encoded"
        progress.write(f"{len(train_pairs):,} training pairs ({how}) and {len(dev_pairs):,} dev pairs on each of "
                       f"{ray.train.get_context().get_world_size()} worker(s); building the model")
    state = None
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            state, resumed_from = load_resume_state(directory)  # a damaged latest checkpoint: the previous good one
            try:  # ids of another tokenizer (retrained by a newer mtcore) would be read by the old embeddings
                check_tokenizer(read_meta(resumed_from), tokenizer, f"resuming run '{inputs.run_name}'")
            except CheckpointError as err:
                raise CheckpointError(f"{err}; the run cannot continue with it: delete "
                                      f"{Path(inputs.storage_path) / inputs.run_name} to train it again") from None
        progress.write(f"resuming from step {state['step']} (epoch {state['epoch']})")
        progress.t0 -= state.get("train_seconds", 0.0)  # the clock shows the budget spent over every resume

    def on_step(metrics: dict[str, float]) -> None:
        _maybe_inject_failure(job, rank, int(metrics["step"]), inputs)
        mlflow_log(metrics, int(metrics["step"]))
        progress.step(metrics)
        ray.train.report(metrics)

    def on_validation(metrics: dict[str, float], ts) -> None:
        mlflow_log(metrics, int(metrics["step"]))
        progress.validation(metrics, ts.best(), run_cfg.train.best_metric)
        if rank != 0:
            ray.train.report(metrics)
            return
        with tempfile.TemporaryDirectory() as tmp:
            directory = save_checkpoint(
                Path(tmp) / "checkpoint", ts.model, tokenizer, train_cfg=run_cfg.train,
                train_state=ts.to_dict(include_model=False), step=ts.step, metrics=metrics,
            )
            extras = ts.last_validation
            (directory / "validation.json").write_text(json.dumps(extras, ensure_ascii=False, indent=2))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory))

    def on_epoch(epoch: int, batches: list[list[int]]) -> None:
        if epoch == 0:  # which pairs this rank trains on: disjoint shares by construction, and this shows it
            shard = Path(inputs.storage_path) / inputs.run_name / "shards" / f"rank-{rank}.json"
            shard.parent.mkdir(parents=True, exist_ok=True)
            shard.write_text(json.dumps({"rank": rank, "epoch": 0, "pairs": sorted(i for b in batches for i in b)}))

    result = fit(
        run_cfg.train, run_cfg.model, train_pairs, dev_pairs, tokenizer,
        device=device, on_step=on_step, on_validation=on_validation, on_epoch=on_epoch, state=state,
    )
    progress.write(stop_line(result.stop_reason, run_cfg.train, result.steps))
    if rank == 0 and inputs.run is not None and result.stop_reason:
        with contextlib.suppress(Exception):  # tracking never stops a finished run
            inputs.run.set_tags({"mtcore.stop_reason": result.stop_reason})
    if result.averaged:  # the outcome either way: the average is a checkpoint only when it won
        avg = result.averaged
        mlflow_log({"average/dev_bleu": avg["dev_bleu"], "average/dev_loss": avg["dev_loss"], "average/snapshots": len(avg["steps"]),
                    "average/kept": float(avg["kept"])}, result.steps)
        progress.write(f"average of steps {avg['steps'][0]}–{avg['steps'][-1]} ({len(avg['steps'])} snapshots): dev BLEU "
                       f"{avg['dev_bleu']:.2f} vs {avg['last_dev_bleu']:.2f}, dev loss {avg['dev_loss']:.3f} vs "
                       f"{avg['last_dev_loss']:.3f} for the last weights; "
                       f"{'kept' if avg['kept'] else 'not kept'}")


def stop_line(reason: str, train, steps: int) -> str:
    """Why training ended, in words: a run that asked for 3,000 steps and made 60 says why."""
    why = {
        "max_steps": f"reached train.max_steps={train.max_steps}",
        "time_budget": f"used its time budget (train.time_budget_min={train.time_budget_min:g})",
        "patience": f"no gain in dev {train.best_metric.replace('dev/', '')} for {train.patience} validations in a row "
                    f"(train.patience={train.patience}; 0 never stops early)",
        "max_epochs": f"made train.max_epochs={train.max_epochs} passes over the data",
        "callback": "stopped by its caller (e.g. a Tune scheduler)",
    }.get(reason, reason or "ended")
    return f"training stopped at step {steps:,}: {why}"


def _maybe_inject_failure(job: TrainingJob, rank: int, step: int, inputs: PreparedInputs) -> None:
    """Kill this worker once (a marker file makes it once per run) to exercise recovery."""
    if not job.job.fail_at_step or rank != job.job.fail_rank or step < job.job.fail_at_step:
        return
    marker = Path(inputs.storage_path) / inputs.run_name / "injected-failure"
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(step))
        raise RuntimeError(f"injected failure on rank {rank} at step {step} (job.fail_at_step)")


# --------------------------------------------------------------------------- driver: scaling and fit


def scaling_for(job: TrainingJob) -> tuple[int, bool]:
    """(workers, use_gpu) on the cluster Ray is connected to: see `mtcore.distributed.plan.scaling_for`."""
    from mtcore.distributed.cluster import available_cpus, available_gpus
    from mtcore.distributed.plan import PlanError
    from mtcore.distributed.plan import scaling_for as plan_scaling

    try:
        return plan_scaling(job, available_cpus(), available_gpus())
    except PlanError as err:
        raise JobError(str(err)) from None


def load_and_plan(config: str | Path | None, overrides: list[str] = ()):
    """(job, plan) for a job file and overrides on the cluster at hand: the config and the data files' existence are
    checked before Ray starts (a typo costs a second); `preset: auto` is then resolved for the GPUs the cluster has."""
    from mtcore.distributed.cluster import available_cpus, available_gpus, init_ray
    from mtcore.distributed.plan import PlanError, check_gpu_request, make_plan

    job = TrainingJob.load(config, overrides)
    try:
        check_gpu_request(job)
        check_heldout_data(job)  # a missing or misnamed file is said in a second, as the other stages say it, not after
        if job.job.train_data:  # Ray has started (~10 s) and the plan is printed
            resolve_train_data(job)
        init_ray()
        gpus = available_gpus() if job.job.use_gpu != "no" else 0
        if job.preset_note and gpus:
            job = TrainingJob.load(config, overrides, gpus=gpus)
        return job, make_plan(job, available_cpus(), available_gpus())
    except PlanError as err:
        raise JobError(str(err)) from None


def make_trainer(job: TrainingJob, inputs: PreparedInputs, workers: int, use_gpu: bool, callbacks: list | None = None):
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    key, order = job.run.train.selection()
    return TorchTrainer(
        train_worker,
        train_loop_config={"job_config": job.to_dict(), "inputs": inputs.__dict__, "attempt": uuid.uuid4().hex},
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(
            name=inputs.run_name,
            storage_path=inputs.storage_path,
            failure_config=FailureConfig(max_failures=job.job.max_failures),
            callbacks=callbacks or None,  # e.g. Tune's report callback, so rank-0 metrics reach the trial
            # The best by `train.best_metric` and (always) the latest are kept.
            checkpoint_config=CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute=key, checkpoint_score_order=order
            ),
        ),
    )


@dataclass
class TrainingOutcome:
    run_name: str
    mlflow_run_id: str
    best_checkpoint: Path
    best_dev_bleu: float
    test: dict[str, Any]
    steps: int
    workers: int
    use_gpu: bool
    elapsed_s: float
    best_dev_loss: float = float("nan")  # the best checkpoint's (a record written before it had one: nan)


def run_training(job: TrainingJob, *, parent_run_id: str | None = None, callbacks: list | None = None,
                 progress_echo=None) -> TrainingOutcome:
    """Prepare inputs, fit on Ray Train, evaluate the best checkpoint on test and log it all.

    `parent_run_id` and `callbacks` serve a Tune search: each trial is a child MLflow
    run, and the callbacks forward the workers' reports to the trial."""
    from mtcore.distributed.cluster import init_ray

    t0 = time.perf_counter()
    init_ray()
    workers, use_gpu = scaling_for(job)
    inputs = prepare_inputs(job, parent_run_id, (workers, use_gpu))
    from mtcore.console import progress_line

    echo = progress_echo or progress_line
    run_dir = Path(inputs.storage_path) / inputs.run_name
    done = _finished_before(run_dir)
    if done is not None:  # the same settings and data (prepare_inputs checked): its result, tested again if need be
        outcome, tested = done
        if not inputs.finished:  # another test set, limit or beam: its best checkpoint decodes that one
            now = tested_with(job)
            changed = ", ".join(TEST_KEYS[k] for k in now if tested.get(k) != now[k])
            echo(f"run '{inputs.run_name}' finished already at step {outcome.steps:,}; testing its best checkpoint again "
                 f"({changed} changed)")
            outcome.test = finish_run(job, inputs, outcome.best_checkpoint, use_gpu, echo)
            outcome.mlflow_run_id = inputs.mlflow_run_id
            with contextlib.suppress(Exception):  # a tracking server gone meanwhile: finish_run said so
                inputs.run.end("FINISHED")
            _record_finished(run_dir, outcome, job)
        echo(f"run '{inputs.run_name}' finished already at step {outcome.steps:,} (test BLEU "
             f"{outcome.test.get('test/bleu', float('nan')):.2f}): nothing to train; to train it again, delete "
             f"{run_dir} or pick another job.run_name")
        return outcome
    train = job.run.train  # what job.workers=0 / use_gpu=auto resolved to: the batch a step really had
    with contextlib.suppress(Exception):
        inputs.run.set_tags({"mtcore.workers": str(workers), "mtcore.device": "cuda" if use_gpu else "cpu",
                             "mtcore.tokens_per_step": str(workers * train.max_tokens * train.accumulation)})
    with follow_progress(run_dir / PROGRESS_FILE, echo, waiting=lambda: waiting_for_workers(workers, use_gpu)):
        echo(f"starting {workers} Ray Train {'GPU' if use_gpu else 'CPU'} worker(s) for run '{inputs.run_name}'")
        try:
            result = make_trainer(job, inputs, workers, use_gpu, callbacks).fit()
        except SystemExit:  # Ray Train's own Ctrl-C handler aborts the run and exits the process
            raise Interrupted(f"training run '{inputs.run_name}' stopped; its MLflow run is marked KILLED, and the same "
                              f"command resumes it from its latest checkpoint") from None
        except Exception as err:  # Ray Train raises a worker's error wrapped: a user's mistake stays one line
            _mark_failed(inputs)
            cause = user_error_of(err)
            if cause is None:
                raise
            raise JobError(f"training run '{inputs.run_name}' failed: {one_line(cause)}") from None
    if result.error is not None:
        _mark_failed(inputs)
        raise JobError(f"training run '{inputs.run_name}' failed: {result.error}") from result.error
    best_ckpt, best_metrics = best_checkpoint(result, job.run.train)
    if best_ckpt is None:
        raise JobError(f"training run '{inputs.run_name}' reported no checkpoint")
    best_dir = _publish_best(Path(best_ckpt.path), run_dir / "best")
    test = finish_run(job, inputs, best_dir, use_gpu, echo)
    outcome = TrainingOutcome(
        inputs.run_name, inputs.mlflow_run_id, best_dir, float(best_metrics.get("dev/bleu", float("nan"))),
        test, int(result.metrics.get("step", 0)), workers, use_gpu, time.perf_counter() - t0,
        float(best_metrics.get("dev/loss", float("nan"))),
    )
    _record_finished(run_dir, outcome, job)
    return outcome


def waiting_for_workers(workers: int, use_gpu: bool) -> str:
    """Why a run's workers have not started yet, as far as the cluster's free resources tell."""
    import ray

    kind = "GPU" if use_gpu else "CPU"
    free, total = ray.available_resources().get(kind, 0), ray.cluster_resources().get(kind, 0)
    return (f"still waiting for {workers} {kind} worker(s) to start: {free:g} of the cluster's {total:g} {kind}s are "
            f"free; another job may hold them, or nodes are still joining (`ray status` shows which)")


FINISHED_FILE = "mtcore-finished.json"  # a run's outcome, once trained and tested: a rerun returns it


def _record_finished(run_dir: Path, outcome: TrainingOutcome, job: TrainingJob) -> None:
    body = asdict(outcome) | {"best_checkpoint": str(outcome.best_checkpoint), "test_settings": tested_with(job)}
    (run_dir / FINISHED_FILE).write_text(json.dumps(body, indent=2, default=str))


def _finished_before(run_dir: Path) -> tuple[TrainingOutcome, dict[str, Any]] | None:
    """(outcome, its test settings) of this run if it finished before (its best checkpoint still there); None
    otherwise. A record from before test settings were kept counts as tested with today's."""
    try:
        body = json.loads((run_dir / FINISHED_FILE).read_text(encoding="utf-8"))
        body["best_checkpoint"] = Path(body["best_checkpoint"])
        tested = body.pop("test_settings", None)
        outcome = TrainingOutcome(**body)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return (outcome, tested) if (outcome.best_checkpoint / "config.json").is_file() else None


def best_checkpoint(result, train_cfg) -> tuple[Any, dict[str, Any]]:
    """(checkpoint, its metrics): the best kept one by `train.best_metric` (a later one on a tie, as Ray keeps
    them; NaN, from a diverged run, never), else the latest."""
    key, order = train_cfg.selection()
    best = None
    for checkpoint, metrics in result.best_checkpoints or []:
        value = metrics.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            if best is None or not train_cfg.is_better(best[1], metrics):
                best = (checkpoint, metrics)
    return best if best is not None else (result.checkpoint, result.metrics)


def _evaluate_on_cluster(checkpoint_dir: Path, pairs, beam: int, use_gpu: bool, train_cfg) -> dict[str, Any]:
    """Decode where the GPUs are: a Ray task asking for one when the job trained on GPUs. The length penalty and
    bound are the run's (`train.len_penalty`, `train.max_len_a/b`: they reached its validation only)."""
    import ray

    from mtcore.tracking.artifacts import evaluate_checkpoint

    task = ray.remote(num_cpus=1, num_gpus=1 if use_gpu else 0)(evaluate_checkpoint)
    return ray.get(task.remote(str(checkpoint_dir), pairs, beam, "cuda" if use_gpu else "cpu", train_cfg.len_penalty,
                               train_cfg.max_len_a, train_cfg.max_len_b))


def finish_run(job: TrainingJob, inputs: PreparedInputs, best_dir: Path, use_gpu: bool, echo=None) -> dict[str, Any]:
    """Test-set evaluation of the best checkpoint (where the GPUs are) and every artifact of the run."""
    from mtcore.tracking.artifacts import HEATMAP_SENTENCES, log_training_artifacts

    test_pairs = load_pairs(inputs.test_data, job, job.job.test_limit, spread=True)
    if echo is not None:
        echo(f"decoding {len(test_pairs):,} test pairs with the best checkpoint (beam {job.job.test_beam}), "
             f"then logging the run's artifacts")
    result = _evaluate_on_cluster(best_dir, test_pairs, job.job.test_beam, use_gpu, job.run.train)
    hyps = result.pop("hyps")
    dev_sources = [s for s, _ in load_pairs(inputs.dev_data, job, HEATMAP_SENTENCES)]
    try:
        log_training_artifacts(inputs.mlflow_run_id, inputs.tracking_uri, result=result, hyps=hyps, test_pairs=test_pairs,
                               dev_sources=dev_sources, best_dir=best_dir, spm_model=inputs.spm_model,
                               config=job.to_dict(), log_model=job.job.log_model, train_data=inputs.train_data,
                               test_data=inputs.test_data)
    except Exception as err:  # noqa: BLE001 - a tracking server gone since the start must not lose the trained run
        log.warning("could not log the test figures and artifacts to MLflow (%s); the run's results are kept in %s",
                    one_line(err)[:300], best_dir.parent)
        return result
    # The test figures' settings: a finished run tested again keeps its first params (MLflow never changes one).
    with contextlib.suppress(Exception):
        inputs.run.set_tags({"mtcore.tested_with": json.dumps({TEST_KEYS[k]: v for k, v in tested_with(job).items()}
                                                              | {"path": str(Path(inputs.test_data).absolute()),
                                                                 "pairs": len(test_pairs)})})
    return result


def _publish_best(checkpoint: Path, stable: Path) -> Path:
    """The best checkpoint by `train.best_metric`, copied to RUN/best: a path that does not change from run to run
    (Ray's own checkpoint folders are numbered and pruned). Written beside, then swapped in."""
    import shutil

    partial = stable.with_name("best.partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(checkpoint, partial)
    shutil.rmtree(stable, ignore_errors=True)
    partial.rename(stable)
    return stable


def _mark_failed(inputs: PreparedInputs) -> None:
    try:
        inputs.run.end("FAILED")
    except Exception as err:  # noqa: BLE001
        log.warning("could not mark the MLflow run failed: %s", err)
