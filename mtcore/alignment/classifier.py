"""A pair classifier that reads both sentences at once: is this target a translation of this source?

The dual encoder compares two pooled vectors, so "Show backup files" and the translation
of "Show hidden files" land close together: one changed word barely moves a mean of
pieces (RESULTS.md, issue 21: ROC AUC 0.80 on outdated translations). Bicleaner-AI's
answer is a classifier over the *pair*, trained on correct pairs against synthetic
noise made from the same corpus (random, fuzzy-matched, word-omitted, ...). Here the same
idea at CPU scale, with the decomposable attention model of Parikh et al. 2016 ("A
Decomposable Attention Model for Natural Language Inference") and ESIM's comparison
features (Chen et al. 2017):

    pieces → embeddings (initialised from the built-in encoder's, which already share a
    bilingual space) → a width-3 convolution (pieces into words) → soft alignment of every
    source piece to the target and back → compare each piece with what it aligned to
    ([a; β; a − β; a ⊙ β] → MLP) → mean- and max-pool each side → MLP → one logit

Max-pooling the per-piece comparisons is the point: one source word with nothing to
align to ("backup") is enough to flag the pair, where a mean over the sentence dilutes it.

Training pairs: each correct pair is a positive; its negative is drawn per step from the
near-miss kinds of `negatives.py` (the fuzzy partner's target, the neighbouring segment,
a partial or detail-swapped target) and random same-catalog targets. The score is the
logit: higher = more likely a translation, as for cosine and margin, so every calibration
rule in `calibration.py` applies unchanged.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mtcore.alignment import negatives
from mtcore.embedding.train import warmup_cosine
from mtcore.errors import MtcoreError
from mtcore.hardware import cpu_trains_in_bf16
from mtcore.nmt.tokenizer import PAD_ID, Tokenizer

log = logging.getLogger(__name__)
CONFIG_FILE, WEIGHTS_FILE = "classifier.json", "classifier.pt"
MIN_TRAINING_PAIRS = 64
NEGATIVE_MIX = {"fuzzy": 0.4, "neighbour": 0.15, "random": 0.15, "made": 0.3}  # made: partial or swapped targets


class ClassifierError(MtcoreError, ValueError):
    pass


@dataclass
class ClassifierConfig:
    vocab_size: int = 8000
    d_embed: int = 256  # the built-in encoder's d_model, so its embeddings can seed ours
    hidden: int = 192
    max_len: int = 64
    dropout: float = 0.1
    # training
    epochs: int = 3
    batch_size: int = 256  # positives per step; as many negatives
    lr: float = 1.5e-3
    warmup: int = 100
    synthetic_rows: int = 40_000  # rows given a partial/swapped target once, before training
    seed: int = 0
    threads: int = 0  # torch threads; 0: torch's default
    bf16: bool = True  # train under bf16 autocast where the CPU has native bf16 (1.8x a step); scoring stays fp32

    def check(self) -> None:
        """Counts that must be positive, said before any work (epochs 0 divided by zero; -3 saved an untrained model)."""
        for key in ("epochs", "batch_size", "hidden", "max_len"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ClassifierError(f"classifier {key}: {getattr(self, key)!r}; pass a whole number >= 1")
        if not (0 <= self.dropout < 1) or not (self.lr > 0):
            raise ClassifierError(f"classifier dropout {self.dropout} (in [0, 1)) or lr {self.lr} (> 0) out of range")

    @classmethod
    def from_dict(cls, d: dict) -> "ClassifierConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ClassifierError(f"unknown classifier config key(s) {unknown}; known: {sorted(known)}")
        return cls(**d)


class PairClassifier(nn.Module):
    """(src ids, tgt ids) → logit that tgt translates src."""

    def __init__(self, cfg: ClassifierConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_embed, padding_idx=PAD_ID)
        self.context = nn.Conv1d(cfg.d_embed, h, kernel_size=3, padding=1)
        self.attend = nn.Linear(h, h)
        self.compare = nn.Sequential(nn.Linear(4 * h, h), nn.GELU(), nn.Dropout(cfg.dropout), nn.Linear(h, h), nn.GELU())
        self.head = nn.Sequential(nn.Linear(4 * h + 2, h), nn.GELU(), nn.Dropout(cfg.dropout), nn.Linear(h, 1))
        nn.init.normal_(self.embed.weight, std=cfg.d_embed**-0.5)

    def _encode(self, ids: torch.Tensor) -> torch.Tensor:
        # pads are zeros, as the convolution's own padding: a pair scores the same in any batch
        h = (self.embed(ids) * (ids != PAD_ID).unsqueeze(-1)).transpose(1, 2)  # (B, d, T)
        return nn.functional.gelu(self.context(h)).transpose(1, 2)  # (B, T, h)

    def _side(self, a: torch.Tensor, aligned: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        v = self.compare(torch.cat([a, aligned, a - aligned, a * aligned], dim=-1))  # (B, T, h)
        m = mask.unsqueeze(-1)
        mean = (v * m).sum(1) / m.sum(1).clamp(min=1.0)
        mx = v.masked_fill(~m, -1e4).max(1).values
        return torch.cat([mean, mx], dim=-1)  # (B, 2h)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        ms, mt = src != PAD_ID, tgt != PAD_ID
        a, b = self._encode(src), self._encode(tgt)  # (B, S, h), (B, T, h)
        e = self.attend(a) @ b.transpose(1, 2) / math.sqrt(a.size(-1))  # (B, S, T)
        pair_mask = ms.unsqueeze(2) & mt.unsqueeze(1)
        e = e.masked_fill(~pair_mask, -1e4)
        beta = torch.softmax(e, dim=2) @ b  # each source piece's view of the target (B, S, h)
        alpha = torch.softmax(e, dim=1).transpose(1, 2) @ a  # each target piece's view of the source (B, T, h)
        ls, lt = ms.sum(1, keepdim=True).float(), mt.sum(1, keepdim=True).float()
        lengths = torch.cat([torch.log1p(ls), torch.log((lt + 1) / (ls + 1))], dim=-1)  # (B, 2)
        feats = torch.cat([self._side(a, beta, ms), self._side(b, alpha, mt), lengths], dim=-1)
        return self.head(feats).squeeze(-1)  # (B,)


def _pad(seqs: list[list[int]], max_len: int) -> torch.Tensor:
    seqs = [s[:max_len] or [PAD_ID] for s in seqs]
    out = torch.full((len(seqs), max(len(s) for s in seqs)), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


@dataclass
class Negatives:
    """Per training row, where its negatives come from (-1: none of that kind)."""

    fuzzy: np.ndarray
    neighbour: np.ndarray
    made_at: np.ndarray  # per row, its partial/swapped target's index in `made_ids` (-1: none)
    made_ids: list[list[int]]
    groups: list[np.ndarray]  # rows of each origin (random same-origin targets)
    group_of: np.ndarray


def build_negatives(src: list[str], tgt: list[str], origins: list[str] | None, tok: Tokenizer, cfg: ClassifierConfig) -> Negatives:
    n = len(src)
    origins = origins if origins is not None else [""] * n
    rng = np.random.default_rng(cfg.seed)
    pick = np.sort(rng.choice(n, size=min(cfg.synthetic_rows, n), replace=False))
    rows, made, _ = negatives.synthetic_targets(tgt, origins, pick, cfg.seed)
    names = {o: i for i, o in enumerate(dict.fromkeys(origins))}
    group_of = np.array([names[o] for o in origins], dtype=np.int64)
    groups = [np.flatnonzero(group_of == g) for g in range(len(names))]
    made_at = np.full(n, -1, dtype=np.int64)
    made_at[rows] = np.arange(len(rows))
    return Negatives(negatives.fuzzy_partners(src, tgt, origins), negatives.neighbour_partners(tgt, origins),
                     made_at, tok.encode(made), groups, group_of)


def draw_negatives(idx: np.ndarray, neg: Negatives, tgt_ids: list[list[int]], rng: np.random.Generator) -> list[list[int]]:
    """One negative target (ids) per row of `idx`, its kind drawn from NEGATIVE_MIX (a missing kind: random)."""
    kinds = rng.choice(list(NEGATIVE_MIX), size=len(idx), p=list(NEGATIVE_MIX.values()))
    out = []
    for i, kind in zip(idx, kinds):
        if kind == "fuzzy" and neg.fuzzy[i] >= 0:
            out.append(tgt_ids[neg.fuzzy[i]])
        elif kind == "neighbour" and neg.neighbour[i] >= 0:
            out.append(tgt_ids[neg.neighbour[i]])
        elif kind == "made" and neg.made_at[i] >= 0:
            out.append(neg.made_ids[neg.made_at[i]])
        else:
            group = neg.groups[neg.group_of[i]]
            j = int(group[rng.integers(len(group))]) if len(group) > 1 else int(rng.integers(len(tgt_ids)))
            if j == i:
                j = (j + 1) % len(tgt_ids)
            out.append(tgt_ids[j])
    return out


def length_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator, pool: int = 50) -> list[np.ndarray]:
    """Shuffled batches of rows of similar length (fairseq's bucketing): rows are shuffled, cut into pools of
    `pool` batches, sorted by length inside each pool; the batches are shuffled again. Short catalog
    messages then no longer pad to the longest sentence of a random batch."""
    order = rng.permutation(len(lengths))
    size = batch_size * pool
    chunks = [order[i : i + size] for i in range(0, len(order), size)]
    batches = []
    for chunk in chunks:
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk) - batch_size + 1, batch_size)]
    rng.shuffle(batches)
    return batches


def fit(model: PairClassifier, src_ids: list[list[int]], tgt_ids: list[list[int]], neg: Negatives,
        cfg: ClassifierConfig, on_log=None) -> dict:
    """Binary cross-entropy, each batch `batch_size` correct pairs and as many negatives."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed + 1)
    n = len(src_ids)
    pool = 50
    full, rest = divmod(n, cfg.batch_size * pool)
    steps_per_epoch = max(1, full * pool + rest // cfg.batch_size)  # what `length_batches` gives
    total = steps_per_epoch * cfg.epochs
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(cfg.warmup, total))
    labels = torch.cat([torch.ones(cfg.batch_size), torch.zeros(cfg.batch_size)])
    model.train()
    t0, last, step = time.perf_counter(), {}, 0
    lengths = np.array([len(a) + len(b) for a, b in zip(src_ids, tgt_ids)])
    # mixed precision: weights, optimiser and loss in fp32, the matmuls' inputs in bf16 (softmax autocasts to fp32)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=cpu_trains_in_bf16(cfg.bf16))
    for _ in range(cfg.epochs):
        for idx in length_batches(lengths, cfg.batch_size, rng, pool):
            src = [src_ids[i] for i in idx]
            tgt = [tgt_ids[i] for i in idx] + draw_negatives(idx, neg, tgt_ids, rng)
            with autocast:
                logits = model(_pad(src + src, cfg.max_len), _pad(tgt, cfg.max_len))
            loss = nn.functional.binary_cross_entropy_with_logits(logits.float(), labels[: len(tgt)])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            if step % 50 == 0 or step == total:
                last = {"loss": round(loss.item(), 4), "step": step, "steps": total,
                        "seconds": round(time.perf_counter() - t0, 1)}
                if on_log:
                    on_log(last)
    model.eval()
    return last


class PairScorer:
    """A trained classifier with its tokenizer: (src, tgt) lists in, logits out."""

    def __init__(self, model: PairClassifier, tokenizer: Tokenizer, path: Path | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.path = path

    @torch.no_grad()
    def score(self, src: list[str], tgt: list[str], batch_size: int = 512) -> np.ndarray:
        out = np.zeros(len(src), dtype=np.float64)
        if not len(src):
            return out
        s_ids, t_ids = self.tokenizer.encode(list(src)), self.tokenizer.encode(list(tgt))
        order = np.argsort([len(a) + len(b) for a, b in zip(s_ids, t_ids)], kind="stable")
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            logits = self.model(_pad([s_ids[i] for i in idx], self.model.cfg.max_len),
                                _pad([t_ids[i] for i in idx], self.model.cfg.max_len))
            out[idx] = logits.double().numpy()
        return out


def save_classifier(model: PairClassifier, directory: str | Path, metrics: dict | None = None) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(asdict(model.cfg) | {"metrics": metrics or {}}, indent=2) + "\n")
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, directory / WEIGHTS_FILE)
    return directory


def read_classifier_metrics(directory: str | Path) -> dict:
    return json.loads((Path(directory) / CONFIG_FILE).read_text()).get("metrics", {})


def has_classifier(directory: str | Path) -> bool:
    return all((Path(directory) / f).is_file() for f in (CONFIG_FILE, WEIGHTS_FILE))


def load_classifier(directory: str | Path, tokenizer: Tokenizer) -> PairScorer:
    directory = Path(directory)
    if not has_classifier(directory):
        raise ClassifierError(f"{directory}: no pair classifier ({CONFIG_FILE}, {WEIGHTS_FILE})")
    d = json.loads((directory / CONFIG_FILE).read_text())
    d.pop("metrics", None)
    model = PairClassifier(ClassifierConfig.from_dict(d))
    model.load_state_dict(torch.load(directory / WEIGHTS_FILE, map_location="cpu", weights_only=True))
    return PairScorer(model, tokenizer, directory)


def train_classifier(src: list[str], tgt: list[str], origins: list[str] | None, tokenizer: Tokenizer,
                     cfg: ClassifierConfig | None = None, init_embeddings: torch.Tensor | None = None,
                     on_log=None) -> tuple[PairClassifier, dict]:
    """Train on correct pairs (in catalog order within each origin) and negatives made from them."""
    cfg = cfg or ClassifierConfig()
    cfg.vocab_size = tokenizer.vocab_size
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    neg = build_negatives(src, tgt, origins, tokenizer, cfg)
    src_ids, tgt_ids = tokenizer.encode(list(src)), tokenizer.encode(list(tgt))
    prep_s = time.perf_counter() - t0
    torch.manual_seed(cfg.seed)
    model = PairClassifier(cfg)
    if init_embeddings is not None and tuple(init_embeddings.shape) == tuple(model.embed.weight.shape):
        with torch.no_grad():
            model.embed.weight.copy_(init_embeddings)
    last = fit(model, src_ids, tgt_ids, neg, cfg, on_log)
    return model, {"train_pairs": len(src), "precision": "bf16" if cpu_trains_in_bf16(cfg.bf16) else "fp32",
                   "prepare_seconds": round(prep_s, 1),
                   "train_seconds": round(time.perf_counter() - t0 - prep_s, 1), "final_loss": last.get("loss")}


# --------------------------------------------------------------------------- beside an encoder

def classifier_dir(encoder_dir: str | Path) -> Path:
    """Beside the encoder, not inside it: the encoder's contents identify the stages that used it, and a
    classifier trained later must not make them look like another encoder's."""
    encoder_dir = Path(encoder_dir)
    return encoder_dir.with_name(f"{encoder_dir.name}-classifier")


def _pieces_hash(encoder_dir: str | Path) -> str:
    from mtcore.embedding.encoder import SPM_FILE
    from mtcore.runs import content_hash

    return content_hash(Path(encoder_dir) / SPM_FILE)


def trained_for(encoder_dir: str | Path) -> bool:
    """A classifier exists for this encoder and reads its pieces (a retrained encoder has other pieces)."""
    out = classifier_dir(encoder_dir)
    if not has_classifier(out):
        return False
    return read_classifier_metrics(out).get("encoder_pieces") == _pieces_hash(encoder_dir)


def load_pair_scorer(encoder_dir: str | Path) -> PairScorer:
    from mtcore.embedding.encoder import SPM_FILE

    return load_classifier(classifier_dir(encoder_dir), Tokenizer(Path(encoder_dir) / SPM_FILE))


def pairs_cut(encoder_dir: str | Path, src: list[str], tgt: list[str]) -> tuple[int, int]:
    """(pairs with a side longer than the classifier reads, that length): it judges those by their first
    `max_len` pieces, so what a long sentence's translation leaves out after them goes unseen."""
    from mtcore.embedding.encoder import SPM_FILE

    max_len = int(json.loads((classifier_dir(encoder_dir) / CONFIG_FILE).read_text())["max_len"])
    tok = Tokenizer(Path(encoder_dir) / SPM_FILE)
    lengths = [len(ids) for ids in tok.encode(list(src) + list(tgt))]
    n = len(src)
    return sum(max(a, b) > max_len for a, b in zip(lengths[:n], lengths[n:])), max_len


def training_pairs(table, encoder_dir: str | Path, exclude_texts: set[str] | None = None, max_pairs: int = 120_000, seed: int = 0):
    """The classifier's training rows: the corpus's usable pairs without the encoder's reference pairs
    (they calibrate the threshold, so they must score as unseen pairs do) and without `exclude_texts`
    (a test set's sentences), `max_pairs` of them at random, in catalog order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mtcore.embedding.encoder import REFERENCE_FILE, read_reference
    from mtcore.embedding.train import _key, quick_clean

    table = quick_clean(table)
    held_keys = {_key(t) for t in exclude_texts or ()}
    ref_path = Path(encoder_dir) / REFERENCE_FILE
    if ref_path.is_file() and pq.ParquetFile(ref_path).metadata.num_rows:
        ref = read_reference(encoder_dir)  # the built-in encoder's are whole catalogs: leaving out their pairs leaves out the catalogs
        held_keys |= {_key(t) for t in ref["src"].to_pylist() + ref["tgt"].to_pylist()}
    keep = [_key(s) not in held_keys and _key(t) not in held_keys for s, t in zip(table["src"].to_pylist(), table["tgt"].to_pylist())]
    table = table.filter(pa.array(keep))
    if len(table) > max_pairs:
        table = table.take(pa.array(np.sort(np.random.default_rng(seed).permutation(len(table))[:max_pairs])))
    keys = [(c, "ascending") for c in ("origin", "id") if c in table.column_names]
    return table.sort_by(keys) if keys else table


def train_beside_encoder(corpus, encoder_dir: str | Path, cfg: ClassifierConfig | None = None, *,
                         exclude_texts: set[str] | None = None, max_pairs: int = 120_000, track: bool = True,
                         langs: tuple[str, str] = ("en", "vi")) -> Path:
    """Train the pair classifier for the encoder in `encoder_dir` (its pieces, its embeddings as the start)
    on `corpus` (a path or a table) and write it to `classifier_dir(encoder_dir)`; with `track`, an MLflow
    run in the encoders' experiment (`train_encoder`) holds its settings, loss curve and timings."""
    import pyarrow as pa

    from mtcore.data.corpus import read_corpus
    from mtcore.embedding.encoder import SPM_FILE, WEIGHTS_FILE

    from mtcore import checks

    cfg = cfg or ClassifierConfig()
    cfg.check()
    encoder_dir = Path(encoder_dir)
    checks.replaceable_dir(classifier_dir(encoder_dir), "a pair classifier", has_classifier, "the classifier folder")
    table = corpus if isinstance(corpus, pa.Table) else read_corpus(corpus, src_lang=langs[0], tgt_lang=langs[1])
    train = training_pairs(table, encoder_dir, exclude_texts, max_pairs, cfg.seed)
    if len(train) < MIN_TRAINING_PAIRS:
        raise ClassifierError(f"only {len(train)} usable pairs to train the pair classifier on; it needs {MIN_TRAINING_PAIRS}")
    cfg.batch_size = min(cfg.batch_size, len(train) // 4)  # a small corpus still gets several steps an epoch
    tok = Tokenizer(encoder_dir / SPM_FILE)
    embeddings = torch.load(encoder_dir / WEIGHTS_FILE, map_location="cpu", weights_only=True).get("embed.weight")
    if embeddings is not None:
        cfg.d_embed = int(embeddings.shape[1])  # start from the encoder's pieces: they already share a bilingual space
    log.info("pair classifier: %d training pairs, %d epochs", len(train), cfg.epochs)
    run = None
    if track:
        from mtcore import tracking
        from mtcore.tracking.run import open_run

        run = open_run("train_encoder", f"classifier-{encoder_dir.name}",
                       tags=tracking.standard_tags("train_encoder", corpus if not isinstance(corpus, pa.Table) else None),
                       params=tracking.flatten(asdict(cfg)) | {"encoder": str(encoder_dir), "data.train_pairs": len(train)})

    def on_log(d: dict) -> None:
        log.info("pair classifier: step %d/%d, loss %.3f, %.0f s", d["step"], d["steps"], d["loss"], d["seconds"])
        if run is not None:
            run.log_metrics({"loss": d["loss"]}, step=d["step"])

    try:
        model, metrics = train_classifier(train["src"].to_pylist(), train["tgt"].to_pylist(),
                                          train["origin"].to_pylist() if "origin" in train.column_names else None, tok, cfg,
                                          embeddings, on_log=on_log)
    except BaseException:
        if run is not None:
            run.end("FAILED")
        raise
    log.info("pair classifier: trained in %.0f s (final loss %s)", metrics["train_seconds"], metrics["final_loss"])
    metrics |= heldout_figures(PairScorer(model, tok), encoder_dir, cfg.seed)
    if run is not None:
        run.log_metrics({k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
        run.end("FINISHED")
    out = classifier_dir(encoder_dir)
    partial = out.with_name(out.name + ".partial")
    save_classifier(model, partial, metrics | {"encoder_pieces": _pieces_hash(encoder_dir)})
    if out.exists():
        import shutil

        shutil.rmtree(out)
    partial.rename(out)
    return out


def heldout_figures(scorer: PairScorer, encoder_dir: str | Path, seed: int = 0) -> dict:
    """ROC AUC of the classifier on the encoder's reference pairs (whole catalogs it never trained on) against
    their near misses, overall and per kind (`negatives.near_miss_pairs`): how well it tells a translation from
    an outdated, neighbouring, partial or detail-swapped one, before it filters anything. {} without a reference."""
    import pyarrow.parquet as pq

    from mtcore.alignment.calibration import separation
    from mtcore.embedding.encoder import REFERENCE_FILE

    path = Path(encoder_dir) / REFERENCE_FILE
    ref = pq.read_table(path) if path.is_file() else None
    if ref is None or len(ref) < 2:
        return {}
    src, tgt = ref["src"].to_pylist(), ref["tgt"].to_pylist()
    origins = ref["origin"].to_pylist() if "origin" in ref.column_names else None
    near = negatives.near_miss_pairs(src, tgt, origins, seed, synthetic_rows=len(src))
    if not len(near):
        return {}
    good, bad = scorer.score(src, tgt), scorer.score([src[i] for i in near.rows], list(near.targets))
    kinds = np.asarray(near.kinds, dtype=object)
    figures = {"heldout_pairs": len(src), "heldout_auc": round(separation(good, bad), 4)}
    figures |= {f"heldout_auc_{k}": round(separation(good, bad[kinds == k]), 4) for k in sorted(set(near.kinds))}
    log.info("pair classifier: %s", describe_heldout(figures))
    return figures


def describe_heldout(figures: dict) -> str:
    """`held-out ROC AUC 0.889 against near misses (fuzzy 0.85, …) on 4,033 reference pairs` ("" without them)."""
    if "heldout_auc" not in figures:
        return ""
    kinds = ", ".join(f"{k[len('heldout_auc_'):]} {v:.3f}" for k, v in sorted(figures.items()) if k.startswith("heldout_auc_"))
    return f"held-out ROC AUC {figures['heldout_auc']:.3f} against near misses ({kinds}) on {figures['heldout_pairs']:,} reference pairs"


def ensure_classifier(encoder_dir: str | Path) -> Path:
    """The classifier of the encoder in `encoder_dir`; for the built-in encoder it is trained on first use
    (the embedded corpus, the dev and test sentences and the reference pairs left out; measured: 780 s on 2 CPU cores)."""
    import fcntl

    from mtcore.embedding import builtin_dir

    encoder_dir = Path(encoder_dir)
    if trained_for(encoder_dir):
        return classifier_dir(encoder_dir)
    if encoder_dir.resolve() != builtin_dir().resolve():
        what = "a pair classifier for another version of it" if has_classifier(classifier_dir(encoder_dir)) else "no pair classifier"
        raise ClassifierError(f"{encoder_dir} has {what} (in {classifier_dir(encoder_dir)}); train one with "
                              f"`python pipelines/train_encoder.py --classifier-only --output {encoder_dir} --corpus YOUR_CORPUS`")
    with open(encoder_dir.parent / ".classifier.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two first commands at once: one trains, the other waits
        if not trained_for(encoder_dir):
            from mtcore.data.corpus import heldout_texts
            from mtcore.data.paths import RAW_PARALLEL

            if not RAW_PARALLEL.exists():
                raise ClassifierError(f"the built-in pair classifier is trained on the embedded corpus, but {RAW_PARALLEL} does not exist")
            exclude = heldout_texts()
            minutes = 8 if cpu_trains_in_bf16(ClassifierConfig.bf16) else 13  # 2 cores: RESULTS.md, issue 21
            log.warning("training the built-in pair classifier on %s (first use of --score classifier; about %d minutes on "
                        "2 CPU cores)", RAW_PARALLEL, minutes)
            train_beside_encoder(RAW_PARALLEL, encoder_dir, exclude_texts=exclude)
    return classifier_dir(encoder_dir)
