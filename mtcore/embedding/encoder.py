"""The built-in bilingual sentence encoder: one shared network for English and Vietnamese.

A dual encoder in the manner of LaBSE (Feng et al. 2022) and Yang et al. 2019
("Improving Multilingual Sentence Embedding using Bi-directional Dual Encoder with
Additive Margin Softmax"), shrunk to run on a CPU in minutes:

    tokens → shared embedding (+ learned positions → `layers` pre-norm Transformer
    encoder layers) → mean over non-pad tokens → LayerNorm → MLP → L2 normalise

Deviations from the papers: a joint SentencePiece vocabulary of a few thousand
pieces instead of 500k, 1–2 layers instead of 12, mean pooling instead of [CLS]
(more stable for tiny models). The default, `layers=0`, is a pure pooled-embedding
encoder (a bag of SentencePiece pieces + MLP): on the embedded corpus it reaches
the retrieval goal at a fraction of the CPU time of one attention layer.

On disk an encoder is a directory: `config.json`, `model.pt` (a state dict, loaded
with `weights_only=True`), `spm.model` (the SentencePiece model) and optionally
`metrics.json` (retrieval accuracy measured when it was trained).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mtcore.cleaning.normalize import without_accelerator
from mtcore.errors import MtcoreError
from mtcore.nmt.tokenizer import PAD_ID, Tokenizer

CONFIG_FILE, WEIGHTS_FILE, SPM_FILE, METRICS_FILE = "config.json", "model.pt", "spm.model", "metrics.json"
REFERENCE_FILE = "reference.parquet"  # held-out known-good pairs: the filter's false-reject calibration
MIN_REFERENCE_PAIRS = 50  # fewer cannot place the filter's 2 % false-reject point


def reading_view(texts: list[str]) -> list[str]:
    """The texts as the built-in encoder reads them, in training and in use: without a menu accelerator marker, whose
    place differs between a message and its translation ("S_tandby Now" / "_Vào chế độ chờ") and splits a word into
    other pieces. Raw catalog text keeps them; the cleaning stage strips a pair's only when both sides carry one."""
    return [without_accelerator(t) for t in texts]


class EncoderError(MtcoreError, ValueError):
    """An encoder that cannot be built, found or loaded; the message says what to do."""


@dataclass
class EncoderConfig:
    vocab_size: int = 8000
    d_model: int = 256
    layers: int = 0  # pooled embeddings + MLP: most of the signal is lexical, and CPU minutes are the budget
    heads: int = 4
    d_ff: int = 512
    dim: int = 256  # output embedding size
    max_len: int = 64  # positions for attention layers; with none, a sentence is read up to POOLED_MAX_PIECES
    dropout: float = 0.1

    def __post_init__(self):
        if self.layers and self.d_model % self.heads:
            raise EncoderError(f"`heads` ({self.heads}) must divide `d_model` ({self.d_model})")

    @classmethod
    def from_dict(cls, d: dict) -> "EncoderConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise EncoderError(f"unknown encoder config key(s) {unknown}; known: {sorted(known)}")
        return cls(**d)


# A bag of pieces has no positions, so nothing ties it to `max_len`: it reads a long sentence whole (a partial
# translation of a 100-piece sentence differs from the full one after piece 64). The cap bounds a batch's memory.
POOLED_MAX_PIECES = 512


class DualEncoder(nn.Module):
    """Sentence → unit vector. Both languages share every weight."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD_ID)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        layer = nn.TransformerEncoderLayer(
            cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout, batch_first=True, norm_first=True
        )
        self.layers = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False) if cfg.layers else None
        self.norm = nn.LayerNorm(cfg.d_model)
        # a small MLP head: with `layers=0` it is all the non-linearity the encoder has
        self.proj = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.dim))
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        nn.init.normal_(self.pos.weight, std=0.02)

    @property
    def max_pieces(self) -> int:
        """Pieces read per sentence; the rest is cut off."""
        return self.cfg.max_len if self.layers is not None else max(self.cfg.max_len, POOLED_MAX_PIECES)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = ids != PAD_ID  # (B, T)
        m = mask.unsqueeze(-1).float()  # (B, T, 1)
        h = self.embed(ids)  # (B, T, d_model)
        if self.layers is not None:
            positions = torch.arange(ids.size(1), device=ids.device)
            h = self.layers(self.drop(h + self.pos(positions)), src_key_padding_mask=~mask)  # (B, T, d_model)
            pooled = self.norm((h * m).sum(1) / m.sum(1).clamp(min=1.0))  # (B, d_model)
        else:  # bag of pieces: pool first, so that dropout and norm act on (B, d_model) only
            pooled = self.norm(self.drop((h * m).sum(1) / m.sum(1).clamp(min=1.0)))  # (B, d_model)
        return nn.functional.normalize(self.proj(pooled), dim=-1)  # (B, dim)


def pad_batch(seqs: list[list[int]], max_len: int) -> torch.Tensor:
    """Right-padded (B, T) ids, T the longest sequence (≤ max_len); an empty text keeps one pad."""
    seqs = [s[:max_len] for s in seqs]
    width = max(1, max((len(s) for s in seqs), default=1))
    out = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


class SentenceEncoder:
    """A trained `DualEncoder` with its tokenizer: texts in, L2-normalised float32 vectors out."""

    kind = "builtin"

    def __init__(self, model: DualEncoder, tokenizer: Tokenizer, path: Path | None = None, device: str = "cpu"):
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.path = path
        self.device = device

    @property
    def name(self) -> str:
        return str(self.path) if self.path else "in-memory"

    @property
    def dim(self) -> int:
        return self.model.cfg.dim

    @torch.no_grad()
    def encode(self, texts: list[str], batch_size: int = 512) -> np.ndarray:
        """(N, dim) float32, rows of unit length. Sorted by length inside, so padding stays small."""
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        ids = self.tokenizer.encode(reading_view(texts))
        order = np.argsort([len(s) for s in ids], kind="stable")
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = pad_batch([ids[i] for i in idx], self.model.max_pieces).to(self.device)
            out[idx] = self.model(batch).float().cpu().numpy()
        return out

    def save(self, directory: str | Path, metrics: dict | None = None) -> Path:
        return save_encoder(self.model, self.tokenizer.model_bytes(), directory, metrics)


def save_encoder(model: DualEncoder, spm_bytes: bytes, directory: str | Path, metrics: dict | None = None) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model = getattr(model, "module", model)  # unwrap DDP
    (directory / CONFIG_FILE).write_text(json.dumps(asdict(model.cfg), indent=2) + "\n")
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, directory / WEIGHTS_FILE)
    (directory / SPM_FILE).write_bytes(spm_bytes)
    if metrics is not None:
        (directory / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    return directory


def is_encoder_dir(path: str | Path) -> bool:
    path = Path(path)
    return all((path / f).is_file() for f in (CONFIG_FILE, WEIGHTS_FILE, SPM_FILE))


def encoder_config(directory: Path) -> EncoderConfig:
    """An encoder directory's config; a translation checkpoint's or an unreadable one is an error naming it."""
    try:
        body = json.loads((directory / CONFIG_FILE).read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise EncoderError(f"{directory / CONFIG_FILE}: not readable as JSON ({err})") from None
    if isinstance(body, dict) and {"model", "train"} <= set(body):  # the layout of mtcore.nmt.checkpoint's config.json
        raise EncoderError(f"{directory}: a translation checkpoint, not a sentence encoder; pass 'builtin' or a directory "
                           "from pipelines/train_encoder.py")
    if not isinstance(body, dict):
        raise EncoderError(f"{directory / CONFIG_FILE}: not an encoder config (a JSON object)")
    return EncoderConfig.from_dict(body)


def load_builtin(directory: str | Path, device: str = "cpu") -> SentenceEncoder:
    directory = Path(directory)
    if not is_encoder_dir(directory):
        raise EncoderError(f"{directory}: not an mtcore encoder (needs {CONFIG_FILE}, {WEIGHTS_FILE}, {SPM_FILE})")
    cfg = encoder_config(directory)
    model = DualEncoder(cfg)
    try:
        model.load_state_dict(torch.load(directory / WEIGHTS_FILE, map_location="cpu", weights_only=True))
    except (RuntimeError, OSError, EOFError, ValueError) as err:  # truncated, or weights of another shape
        raise EncoderError(f"{directory / WEIGHTS_FILE}: damaged, or not the weights its {CONFIG_FILE} describes "
                           f"({' '.join(str(err).split())[:160]}); train the encoder again") from None
    try:
        tokenizer = Tokenizer(directory / SPM_FILE)
    except (RuntimeError, OSError) as err:
        raise EncoderError(f"{directory / SPM_FILE}: not a readable SentencePiece model "
                           f"({' '.join(str(err).split())[:120]}); train the encoder again") from None
    return SentenceEncoder(model, tokenizer, directory, device)


def encoder_languages(directory: str | Path) -> tuple[str, str] | None:
    """The (source, target) languages an mtcore encoder was trained on, from its metrics; None when it does not
    say (an encoder trained before it was recorded)."""
    langs = read_metrics(directory).get("langs")
    return tuple(langs.split("-", 1)) if isinstance(langs, str) and "-" in langs else None


def read_reference(directory: str | Path, langs: tuple[str, str] | None = None):
    """The encoder directory's reference pairs as a table of `langs` (src, tgt): written in the encoder's own
    language order, they are turned round for a corpus of the reverse pair (a vi-en corpus, the en-vi built-in
    encoder), so that they are compared with the corpus side by side."""
    from mtcore.data.corpus import read_corpus, swap_sides

    trained = encoder_languages(directory) or ("en", "vi")  # the built-in encoder's pair, recorded or not
    table = read_corpus(Path(directory) / REFERENCE_FILE, src_lang=trained[0], tgt_lang=trained[1])
    return swap_sides(table) if langs is not None and is_reverse_pair(langs, trained) else table


def is_reverse_pair(langs: tuple[str, str], trained: tuple[str, str]) -> bool:
    """`langs` is the pair `trained` turned round (vi-en for en-vi)."""
    return tuple(langs) != tuple(trained) and tuple(langs) == tuple(trained[::-1])


def read_metrics(directory: str | Path) -> dict:
    path = Path(directory) / METRICS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}
