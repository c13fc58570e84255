"""Training the built-in dual encoder: loss, the plain-PyTorch loop, the Ray Train driver.

Loss: bidirectional in-batch softmax with an additive margin (Yang et al. 2019,
"Improving Multilingual Sentence Embedding using Bi-directional Dual Encoder with
Additive Margin Softmax", eq. 3–5; as used for LaBSE). For a batch of B pairs with
similarities S = X·Yᵀ, the logits are scale · (S − margin · I) and the loss is the
mean of cross-entropy over rows (en→vi) and over columns (vi→en).

Batches mix a few runs of neighbouring messages from the same catalog
(`group_size` rows each): their in-batch negatives are the near misses that the
filter must later tell apart ("Cannot open file" vs "Cannot read file").
With `fuzzy_negatives`, each row also brings the target of the most word-similar
other message of its catalog (`mtcore.alignment.negatives.fuzzy_partners`) as an
extra column of the en→vi softmax: Bicleaner-AI's "fuzzy" negatives, and the hard
negatives of Guo et al. 2018 / LaBSE; they teach the encoder that "Show backup files"
is not "Hiển thị tập tin ẩn".

Three pieces, kept apart as in Ray's own examples: `fit()` (plain PyTorch, usable
without Ray), `train_loop_per_worker()` (unpacks the config, calls `fit`, rank 0
logs to MLflow and saves), `train_encoder()` (the driver: data, tokenizer,
`TorchTrainer`, evaluation, artifacts).
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import tempfile
import time
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from mtcore import checks
from mtcore.embedding.encoder import (
    DualEncoder,
    EncoderConfig,
    MIN_REFERENCE_PAIRS,
    REFERENCE_FILE,
    EncoderError,
    is_encoder_dir,
    pad_batch,
    reading_view,
    save_encoder,
)
from mtcore.nmt.tokenizer import Tokenizer, train_tokenizer

log = logging.getLogger(__name__)
EXPERIMENT = "train_encoder"


@dataclass
class EncoderTrainConfig:
    model: EncoderConfig = field(default_factory=EncoderConfig)
    batch_size: int = 256
    epochs: int = 6
    max_steps: int = 0  # 0: as many as `epochs` give
    lr: float = 2e-3
    warmup: int = 100
    margin: float = 0.3  # additive margin, Yang et al. 2019 found 0.3 best
    scale: float = 20.0  # softmax temperature⁻¹ for cosine logits
    group_size: int = 32  # rows of neighbouring messages kept together in a batch (hard negatives)
    fuzzy_negatives: bool = False  # add each row's most word-similar same-catalog message's target as a negative (issue 21; opt-in: measured +0.01 AUC, no gain in recall at 2 % false rejects, 1.2x training time; RESULTS.md)
    heldout: int = 1000  # pairs held out for retrieval P@1
    reference_pairs: int = 4000  # whole catalogs held out as known-good pairs for the filter's calibration (about this many, ≤ 15 % of the data)
    max_pairs: int = 120_000  # cap on training pairs (CPU minutes)
    seed: int = 0
    num_workers: int = 1
    use_gpu: bool = False
    log_every: int = 50
    langs: tuple[str, str] = ("en", "vi")  # the corpus's (source, target) languages: its cleaning and Moses suffixes

    def check(self) -> None:
        """Ranges, checked before any work (the model's fields may be set after construction)."""
        checks.at_least("--epochs", self.epochs, 1)
        checks.at_least("--layers", self.model.layers, 0)
        checks.at_least("--batch-size", self.batch_size, 2)  # in-batch negatives need a second pair
        checks.at_least("--vocab-size", self.model.vocab_size, 16)
        checks.at_least("--num-workers", self.num_workers, 1)
        for name in ("max_steps", "warmup", "heldout", "reference_pairs"):
            checks.at_least(name, getattr(self, name), 0)
        for name in ("max_pairs", "group_size", "log_every"):
            checks.at_least(name, getattr(self, name), 1)

    @classmethod
    def from_dict(cls, d: dict) -> "EncoderTrainConfig":
        d = dict(d)
        model = EncoderConfig.from_dict(d.pop("model", {}))
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(d) - known)
        if unknown:
            raise EncoderError(f"unknown training config key(s) {unknown}; known: {sorted(known)}")
        if "langs" in d:  # a list once it has been through JSON
            d["langs"] = tuple(d["langs"])
        return cls(model=model, **d)


# --------------------------------------------------------------------------- data


_LETTER = re.compile(r"[^\W\d_]")
_FORMAT = re.compile(r"%(\d+\$)?[-+ #0]*\d*(\.\d+)?[hlLqjzt]*[diouxXeEfFgGaAcspn%]|\{\d*\}|\$\{?\w+\}?")


def _key(text: str) -> str:
    """Dedupe key: case, accelerators, format specifiers, punctuation and spacing do not count."""
    text = unicodedata.normalize("NFC", text).lower().replace("_", "").replace("&", "")
    return " ".join(re.sub(r"[^\w]+", " ", _FORMAT.sub(" ", text)).split())


def quick_clean(table: pa.Table, max_chars: int = 400) -> pa.Table:
    """A small junk filter for encoder training when the cleaning stage is not at hand.

    Drops empty sides, untranslated copies, texts without letters, very long texts,
    extreme length ratios, and duplicates (by source and by target, so that no batch
    holds two rows whose targets are the same: they would be false negatives).
    """
    src, tgt = table.column("src").to_pylist(), table.column("tgt").to_pylist()
    keep, seen_src, seen_tgt = [], set(), set()
    for i, (s, t) in enumerate(zip(src, tgt)):
        s, t = (s or "").strip(), (t or "").strip()
        if not s or not t or s == t or len(s) > max_chars or len(t) > max_chars:
            continue
        if not _LETTER.search(s) or not _LETTER.search(t):
            continue
        ratio = (len(t) + 5) / (len(s) + 5)
        if not 0.4 <= ratio <= 3.0:
            continue
        ks, kt = _key(s), _key(t)
        if not ks or not kt or ks == kt or ks in seen_src or kt in seen_tgt:
            continue
        seen_src.add(ks)
        seen_tgt.add(kt)
        keep.append(i)
    return table.take(pa.array(keep, pa.int64()))


def clean_for_training(table: pa.Table, langs: tuple[str, str] = ("en", "vi")) -> tuple[pa.Table, str]:
    """The cleaning stage's default rules for the corpus's languages, then `quick_clean`.

    `quick_clean` runs either way: its stricter dedupe (by source and by target
    separately) keeps false negatives out of the in-batch softmax. Languages the
    language-ID rule does not know are cleaned without the cleaning rules (a warning
    says so): the en-vi rules would reject a de-en corpus as `wrong_language`.
    """
    from mtcore.cleaning import clean_table
    from mtcore.cleaning.config import load_config
    from mtcore.cleaning.pipeline import warn_dominant_rejects
    from mtcore.config import ConfigError

    how = "quick_clean"
    try:
        rules = load_config().with_languages(*langs)
    except ConfigError as err:
        log.warning("%s: cleaning the training pairs with the quick junk filter only", err)
    else:
        table, _, report = clean_table(table, rules)
        warn_dominant_rejects(report.to_dict(), rules)  # a corpus of other languages than `langs`: most rows rejected
        how = "mtcore.cleaning+quick_clean"
    return quick_clean(table), how


PRESAMPLE_FACTOR = 4  # rows kept before cleaning, per pair the encoder uses at most (cleaning rejects ~13 % here)


def presample(table: pa.Table, cfg: EncoderTrainConfig) -> pa.Table:
    """A corpus far larger than the encoder uses (`max_pairs` + held-out + reference pairs), sampled (seeded, in
    order) before cleaning: cleaning 10M rows in one process took hours to keep 120,000. The embedded corpus
    (181,532 rows) is far under it."""
    cap = PRESAMPLE_FACTOR * (cfg.max_pairs + cfg.heldout + cfg.reference_pairs)
    if len(table) <= cap:
        return table
    return table.take(pa.array(np.sort(np.random.default_rng(cfg.seed).choice(len(table), cap, replace=False))))


MIN_HELDOUT = 100  # fewer held-out pairs make a P@1 that measures little (1 pair: 0 or 1)


def warn_small(train: int, held: int, reference: int) -> None:
    """What a small corpus leaves out, said: the retrieval figure's support, and the reference pairs that calibrate
    `align_filter` (without them it calibrates on near misses, and a weak encoder rejects good pairs)."""
    if held < MIN_HELDOUT:
        log.warning("retrieval P@1 is measured on %d held-out pair(s) only (at most a tenth of the corpus is held out): "
                    "it says little about this encoder, which trained on %d pairs", held, train)
    if reference < MIN_REFERENCE_PAIRS:
        log.warning("%d reference pair(s) held out (align_filter calibrates on ≥ %d): align_filter will calibrate on "
                    "near misses, and an encoder trained on %d pairs may reject many good ones; give align_filter a "
                    "--reference of known-good pairs, or train on more", reference, MIN_REFERENCE_PAIRS, train)


def split_heldout(table: pa.Table, n: int, seed: int, exclude: set[str] | None = None) -> tuple[pa.Table, pa.Table]:
    """(train, heldout): `n` random rows held out; rows whose src or tgt is in `exclude` never train."""
    if exclude:
        keys = {_key(t) for t in exclude}
        mask = [(_key(s) not in keys and _key(t) not in keys) for s, t in zip(table["src"].to_pylist(), table["tgt"].to_pylist())]
        table = table.filter(pa.array(mask))
    n = min(n, len(table) // 10)
    order = np.random.default_rng(seed).permutation(len(table))
    held = np.sort(order[:n])
    rest = np.sort(order[n:])
    return table.take(pa.array(rest)), table.take(pa.array(held))


REFERENCE_CATALOGS = 20  # the reference is drawn from at least this many catalogs where the corpus has them


def split_reference(table: pa.Table, n: int, seed: int) -> tuple[pa.Table, pa.Table]:
    """(train, reference): whole origins (catalogs) drawn at random until about `n` rows (n at most a tenth
    of the table; never over 1.5·n) are held out. Whole catalogs: like a user's corpus, the reference then comes from catalogs
    the encoder never saw, not from neighbours of its training rows. Many small catalogs rather than a few large
    ones (each at most n / `REFERENCE_CATALOGS` rows, where enough such catalogs exist): the filter's threshold is
    the reference's score distribution, and a reference of 10 catalogs, two thirds of it gnumeric's function help and
    binutils' messages, put the built-in encoder's threshold where it rejected 5 % of other catalogs' good pairs
    (measured, 2026-11-28; another draw of 13 catalogs: 1 %). Random rows without an `origin` column, or when every
    origin is too large."""
    n = min(n, len(table) // 10)
    if n <= 0:
        return table, table.slice(0, 0)
    rng = np.random.default_rng(seed + 1)
    if "origin" not in table.column_names:
        held = np.zeros(len(table), bool)
        held[rng.permutation(len(table))[:n]] = True
    else:
        origins = np.asarray(table["origin"].to_pylist(), dtype=object)
        names, counts = np.unique(origins, return_counts=True)
        order = rng.permutation(len(names))
        for cap in (max(1, n // REFERENCE_CATALOGS), max(1, n // 2)):  # small catalogs first; a corpus of few, larger ones
            chosen, total = [], 0
            for i in order:
                if total >= n:
                    break
                if counts[i] <= cap and total + counts[i] <= n + n // 2:  # many catalogs, none dominating
                    chosen.append(names[i])
                    total += int(counts[i])
            if total >= n // 2:
                break
        held = np.isin(origins, chosen)
        if not held.any():
            held[rng.permutation(len(table))[:n]] = True
    return table.filter(pa.array(~held)), table.filter(pa.array(held))


def group_batches(n: int, batch_size: int, group_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Batches of row indices (rows are in catalog order): shuffled runs of `group_size` neighbours.

    A random offset each epoch changes which neighbours share a run.
    """
    group_size = max(1, min(group_size, batch_size))
    offset = int(rng.integers(group_size))
    starts = np.arange(-offset, n, group_size)
    runs = [np.arange(max(s, 0), min(s + group_size, n)) for s in starts]
    runs = [r for r in runs if len(r)]
    rng.shuffle(runs)
    flat = np.concatenate(runs) if runs else np.zeros(0, dtype=np.int64)
    return [flat[i : i + batch_size] for i in range(0, len(flat) - 1, batch_size) if len(flat[i : i + batch_size]) > 1]


# --------------------------------------------------------------------------- loss and loop


def additive_margin_loss(x: torch.Tensor, y: torch.Tensor, margin: float, scale: float, y_hard: torch.Tensor | None = None) -> torch.Tensor:
    """Bidirectional in-batch softmax with additive margin; x, y: (B, dim), unit rows, pairs on the diagonal.

    `y_hard` (H, dim): extra targets that are negatives for every source (en→vi direction only).
    """
    sims = x @ y.T  # (B, B)
    logits = scale * (sims - margin * torch.eye(len(x), device=x.device, dtype=x.dtype))
    labels = torch.arange(len(x), device=x.device)
    rows = logits if y_hard is None or not len(y_hard) else torch.cat([logits, scale * (x @ y_hard.T)], dim=1)  # (B, B + H)
    return (nn.functional.cross_entropy(rows, labels) + nn.functional.cross_entropy(logits.T, labels)) / 2


def fit(
    model: nn.Module,
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    cfg: EncoderTrainConfig,
    *,
    device: str | torch.device = "cpu",
    on_log=None,
    rank: int = 0,
    world_size: int = 1,
    hard: list[int] | None = None,
) -> dict:
    """The training loop, plain PyTorch. Rows must be in catalog order (for the hard-negative runs).

    Each worker takes every `world_size`-th batch; `model` may be DDP-wrapped. `hard[i]`: the row
    whose target is row i's fuzzy negative (-1: none). Returns the last logged metrics.
    """
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    max_len = getattr(model, "module", model).max_pieces  # DDP wraps it
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    steps_per_epoch = max(1, math.ceil(len(src_ids) / cfg.batch_size) // world_size)
    total = cfg.max_steps or steps_per_epoch * cfg.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(cfg.warmup, total))
    model.train()
    step, t0, seen, last = 0, time.perf_counter(), 0, {}
    while step < total:
        batches = group_batches(len(src_ids), cfg.batch_size, cfg.group_size, rng)[rank::world_size]
        for idx in batches:
            if step >= total:
                break
            x = model(pad_batch([src_ids[i] for i in idx], max_len).to(device))
            y = model(pad_batch([tgt_ids[i] for i in idx], max_len).to(device))
            neg = [hard[i] for i in idx if hard[i] >= 0] if hard is not None else []
            y_hard = model(pad_batch([tgt_ids[j] for j in neg], max_len).to(device)) if neg else None
            loss = additive_margin_loss(x, y, cfg.margin, cfg.scale, y_hard)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            seen += len(idx)
            if step % cfg.log_every == 0 or step == total:
                elapsed = time.perf_counter() - t0
                last = {"loss": loss.item(), "lr": sched.get_last_lr()[0], "pairs_per_s": seen / elapsed, "step": step,
                        "total": total}
                if on_log:
                    on_log(last, step)
    model.eval()
    return last


# --------------------------------------------------------------------------- evaluation


def warmup_cosine(warmup: int, total: int):
    """The learning-rate factor at step s: linear warm-up, then cosine decay to 0 at `total`. The warm-up is at most
    a tenth of the run: a small corpus's 60 steps under a 100-step warm-up never passed 36 % of the rate (and its
    pair classifier, 30 steps at 21 %, learned nothing)."""
    warmup = max(1, min(warmup, total // 10))
    return lambda s: min((s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))


def retrieval_accuracy(encoder, src: list[str], tgt: list[str], langs: tuple[str, str] = ("en", "vi")) -> dict[str, float]:
    """P@1 of finding each sentence's translation among all held-out ones, in both directions
    (`p_at_1_en_vi`, `p_at_1_vi_en` for an en-vi corpus)."""
    x, y = encoder.encode(src), encoder.encode(tgt)
    sims = x @ y.T
    gold = np.arange(len(src))
    forward = float((sims.argmax(1) == gold).mean()) if len(src) else 0.0
    backward = float((sims.argmax(0) == gold).mean()) if len(src) else 0.0
    s, t = langs
    return {f"p_at_1_{s}_{t}": forward, f"p_at_1_{t}_{s}": backward, "p_at_1": (forward + backward) / 2,
            "heldout_pairs": len(src)}


# --------------------------------------------------------------------------- Ray Train


def _tokenizer_from_bytes(spm_bytes: bytes, directory: str) -> Tokenizer:
    path = Path(directory) / "spm.model"
    path.write_bytes(spm_bytes)
    return Tokenizer(path)


class _StepLines:
    """Rank 0's logging callback: every logged step to MLflow, and a progress line for the user at most every
    15 s (the first use of the built-in encoder trains for minutes before the job's first line of its own)."""

    def __init__(self, mlflow_log, progress_path: str | None, every_s: float = 15.0):
        from mtcore.distributed.progress import ProgressFile

        self.mlflow_log, self.every_s, self.last_line = mlflow_log, every_s, 0.0
        self.progress = ProgressFile(Path(progress_path), 0, enabled=True) if progress_path else None

    def __call__(self, metrics: dict, step: int) -> None:
        if self.mlflow_log is not None:
            self.mlflow_log({k: v for k, v in metrics.items() if k != "total"}, step)
        now = time.perf_counter()
        total = metrics.get("total", step)
        if self.progress is not None and (now - self.last_line >= self.every_s or step == total):
            self.last_line = now
            self.progress.write(f"encoder step {step:>6}/{total}  loss {metrics['loss']:.3f}  "
                                f"{metrics['pairs_per_s']:,.0f} pairs/s  {self.progress.clock()}")


def train_loop_per_worker(config: dict) -> None:
    """One Ray Train worker: tokenise its data, `fit`, rank 0 logs to MLflow and saves a checkpoint."""
    import ray.train
    import ray.train.torch

    cfg = EncoderTrainConfig.from_dict(config["train"])
    spm_bytes, src, tgt, run = config["spm"], config["src"], config["tgt"], config.get("run")
    hard = config.get("hard")
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    with tempfile.TemporaryDirectory() as tmp:
        tok = _tokenizer_from_bytes(spm_bytes, tmp)
        src_ids, tgt_ids = tok.encode(src), tok.encode(tgt)  # already in the encoder's reading view (train_encoder)
        device = ray.train.torch.get_device()
        torch.manual_seed(cfg.seed)  # the same initial weights on every worker and every run
        model = DualEncoder(cfg.model)
        model = ray.train.torch.prepare_model(model) if world > 1 or cfg.use_gpu else model.to(device)
        from mtcore.tracking.run import SafeLogger

        on_log = _StepLines(SafeLogger(run) if run is not None else None, config.get("progress")) if rank == 0 else None
        last = fit(model, src_ids, tgt_ids, cfg, device=device, on_log=on_log, rank=rank, world_size=world, hard=hard)
        if rank == 0:
            ckpt_dir = Path(tmp) / "encoder"
            save_encoder(model, spm_bytes, ckpt_dir)
            (ckpt_dir / "train_config.json").write_text(json.dumps(config["train"], indent=2) + "\n")
            ray.train.report(last, checkpoint=ray.train.Checkpoint.from_directory(str(ckpt_dir)))
        else:
            ray.train.report(last)


@dataclass
class TrainedEncoder:
    path: Path
    metrics: dict
    run_id: str | None


def train_encoder(
    corpus: str | Path | pa.Table,
    output: str | Path,
    cfg: EncoderTrainConfig | None = None,
    *,
    exclude_texts: set[str] | None = None,
    track: bool = True,
    run_name: str | None = None,
) -> TrainedEncoder:
    """Train an encoder on a parallel corpus with Ray Train and write it to `output` (a directory).

    `exclude_texts`: sentences that must not be trained on (e.g. a test set's).
    """
    cfg = cfg or EncoderTrainConfig()
    cfg.check()  # before the corpus is read or Ray is imported
    output = checks.output_dir(output).absolute()
    checks.output_apart(output, {} if isinstance(corpus, pa.Table) else {"corpus": corpus})
    checks.replaceable_dir(output, "an encoder", is_encoder_dir)  # training swaps the folder in whole

    import ray.train
    from ray.train.torch import TorchTrainer

    from mtcore.console import progress_line
    from mtcore.distributed.cluster import available_cpus, available_gpus, init_ray
    from mtcore.distributed.progress import PROGRESS_FILE, follow_progress
    from mtcore.data.corpus import read_corpus, write_parquet
    from mtcore.runs import home

    table = corpus if isinstance(corpus, pa.Table) else read_corpus(corpus, src_lang=cfg.langs[0], tgt_lang=cfg.langs[1])
    n_input = len(table)
    table = presample(table, cfg)
    n_sampled = len(table)
    table, cleaned_by = clean_for_training(table, cfg.langs)
    n_cleaned = n_sampled - len(table)
    sort_keys = [(c, "ascending") for c in ("origin", "id") if c in table.column_names]
    train, held = split_heldout(table, cfg.heldout, cfg.seed, exclude_texts)
    train, reference = split_reference(train, cfg.reference_pairs, cfg.seed)
    n_uncapped = len(train)
    if len(train) > cfg.max_pairs:
        train = train.take(pa.array(np.sort(np.random.default_rng(cfg.seed).permutation(len(train))[: cfg.max_pairs])))
    if sort_keys:
        train = train.sort_by(sort_keys)
    if len(train) < 2:
        raise EncoderError(f"only {len(train)} usable training pair(s) after cleaning {n_input} rows")
    hard = None
    if cfg.fuzzy_negatives:
        from mtcore.alignment.negatives import fuzzy_partners

        origins = train["origin"].to_pylist() if "origin" in train.column_names else None
        hard = fuzzy_partners(train["src"].to_pylist(), train["tgt"].to_pylist(), origins).tolist()

    t0 = time.perf_counter()
    excluded = n_sampled - n_cleaned - len(held) - len(reference) - n_uncapped  # texts of the excluded sets
    progress_line(f"encoder: {len(train):,} training pairs ({n_input:,} read"
                  + (f", {n_sampled:,} of them sampled" if n_sampled < n_input else "")
                  + f", {n_cleaned:,} removed by cleaning, {len(held):,} held out, {len(reference):,} reference pairs"
                  + (f", {excluded:,} excluded (texts it must not train on)" if excluded else "")
                  + (f", {n_uncapped - len(train):,} over max_pairs" if n_uncapped > len(train) else "")
                  + "); training its tokenizer")
    with tempfile.TemporaryDirectory() as tmp:
        # the texts as the encoder reads them (`reading_view`), once here for the tokenizer and every worker
        src, tgt = reading_view(train["src"].to_pylist()), reading_view(train["tgt"].to_pylist())
        tok = train_tokenizer(src + tgt, Path(tmp) / "spm.model", vocab_size=cfg.model.vocab_size)
        spm_bytes = tok.model_bytes()
    cfg.model.vocab_size = tok.vocab_size  # hard_vocab_limit=False may give fewer pieces on small corpora
    tokenizer_s = time.perf_counter() - t0

    init_ray()
    cfg.use_gpu = cfg.use_gpu or available_gpus() > 0
    if not cfg.use_gpu:
        cfg.num_workers = max(1, min(cfg.num_workers, available_cpus()))
    train_dict = asdict(cfg)

    run = None
    if track:
        from mtcore import tracking
        from mtcore.tracking.run import open_run

        corpus_tag = corpus if not isinstance(corpus, pa.Table) else None
        run = open_run(EXPERIMENT, run_name or f"encoder-{output.name}", tags=tracking.standard_tags(EXPERIMENT, corpus_tag),
                       params=tracking.flatten(train_dict) | {"data.train_pairs": len(train), "data.heldout_pairs": len(held),
                                                              "data.input_rows": n_input, "data.cleaned_by": cleaned_by})
    storage = (home() / "ray_results").resolve()
    progress = storage / f"train_encoder-{output.name}" / PROGRESS_FILE
    progress.unlink(missing_ok=True)
    try:
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config={"train": train_dict, "spm": spm_bytes, "src": src, "tgt": tgt,
                               "hard": hard, "run": run, "progress": str(progress)},
            scaling_config=ray.train.ScalingConfig(num_workers=cfg.num_workers, use_gpu=cfg.use_gpu),
            run_config=ray.train.RunConfig(name=f"train_encoder-{output.name}", storage_path=str(storage)),
        )
        progress_line(f"encoder: training on {cfg.num_workers} Ray Train {'GPU' if cfg.use_gpu else 'CPU'} worker(s)")
        with follow_progress(progress, progress_line):
            result = trainer.fit()
        train_s = time.perf_counter() - t0
        tmp_out = output.with_name(output.name + ".partial")
        shutil.rmtree(tmp_out, ignore_errors=True)
        with result.checkpoint.as_directory() as ckpt:
            shutil.copytree(ckpt, tmp_out)
        from mtcore.embedding.encoder import load_builtin

        encoder = load_builtin(tmp_out)
        metrics = retrieval_accuracy(encoder, held["src"].to_pylist(), held["tgt"].to_pylist(), cfg.langs)
        metrics["langs"] = "-".join(cfg.langs)  # what `align_filter --langs` checks the encoder against
        metrics |= {"train_pairs": len(train), "train_seconds": round(train_s, 1), "tokenizer_seconds": round(tokenizer_s, 1), "final_loss": result.metrics.get("loss")}
        # written even when empty (a tiny corpus): the encoder is complete, the filter falls back to near misses
        write_parquet(reference.select([c for c in ("src", "tgt", "origin") if c in reference.column_names]), tmp_out / REFERENCE_FILE)
        metrics["reference_pairs"] = len(reference)
        warn_small(len(train), len(held), len(reference))
        (tmp_out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        if output.exists():
            shutil.rmtree(output)
        tmp_out.rename(output)
        if run is not None:
            run.log_metrics({k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
            run.log_artifacts(output, "encoder")
            run.end("FINISHED")
    except BaseException:
        if run is not None:
            run.end("FAILED")
        raise
    return TrainedEncoder(output, metrics, run.run_id if run is not None else None)
