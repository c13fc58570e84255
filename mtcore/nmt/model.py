"""The Transformer encoder-decoder of "Attention Is All You Need" (Vaswani et al. 2017).

Built from the smallest parts up: attention -> feed-forward -> layer -> stack -> model.
Deviations from the paper, all deliberate:
- one shared (joint SentencePiece) vocabulary, so the encoder embedding, decoder
  embedding and output projection are one matrix (§3.4 ties the two embeddings and
  the pre-softmax projection; with a joint vocabulary the encoder shares it too);
- an optional pre-norm layout (`pre_norm=True`, Wang et al. 2019) with a final LayerNorm
  on each stack;
- attention through `F.scaled_dot_product_attention`; attention weights are computed
  only on request (`record_attention`), never in the fast path;
- incremental decoding: `decode_step` feeds one new position and caches self-attention
  keys/values (growing by one position per step) and cross-attention keys/values
  (computed once per source), so a decoding step costs one position, not the prefix.

Masks are boolean, True = may attend.

`build_model` builds either architecture from `ModelConfig.arch`: this Transformer or the
attention RNN encoder-decoder of `mtcore.nmt.rnn`, which has the same interface (`Seq2Seq`).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from mtcore.config import ModelConfig
from mtcore.nmt.rnn import RNNSeq2Seq
from mtcore.nmt.rnn import init_weights as init_rnn_weights
from mtcore.nmt.tokenizer import PAD_ID

# --------------------------------------------------------------------------- parts


class PositionalEncoding(nn.Module):
    """Sinusoidal positions, §3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""

    def __init__(self, d_model: int, max_positions: int):
        super().__init__()
        pos = torch.arange(max_positions).unsqueeze(1)  # (P, 1)
        div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))  # (d/2,)
        pe = torch.zeros(max_positions, d_model)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe, persistent=False)  # derived, not a weight: keeps checkpoints small

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        T = x.size(1)
        if offset + T > self.pe.size(0):
            raise ValueError(f"sequence of {offset + T} positions exceeds `max_positions` ({self.pe.size(0)})")
        return x + self.pe[offset : offset + T]  # (B, T, d_model)


@dataclass
class KVCache:
    """Keys/values of one attention sublayer during incremental decoding, each (B, heads, T, d_head)."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    def reorder(self, index: torch.Tensor) -> None:
        """Select batch rows (beam reordering, or dropping finished sentences)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """§3.2.2: h heads of scaled dot-product attention over learned projections."""

    def __init__(self, d_model: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.d_head, self.dropout = heads, d_model // heads, dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.recorded: list[torch.Tensor] | None = None  # set by `record_attention`

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.heads, self.d_head).transpose(1, 2)  # (B, h, T, d_head)

    def project_kv(self, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._split(self.k_proj(kv)), self._split(self.v_proj(kv))

    def forward(
        self,
        x: torch.Tensor,  # (B, T, d_model) queries
        kv: torch.Tensor | None,  # (B, S, d_model) keys/values source; None with a filled cross-attention cache
        mask: torch.Tensor | None = None,  # (B, 1, T|1, S) bool
        *,
        causal: bool = False,
        cache: KVCache | None = None,
        append: bool = False,  # self-attention cache: add kv's new positions to the cache
    ) -> torch.Tensor:
        B, T, D = x.shape
        q = self._split(self.q_proj(x))  # (B, h, T, d_head)
        if cache is None:
            k, v = self.project_kv(kv)  # (B, h, S, d_head)
        elif append:
            k_new, v_new = self.project_kv(kv)
            cache.k = k_new if cache.k is None else torch.cat([cache.k, k_new], dim=2)
            cache.v = v_new if cache.v is None else torch.cat([cache.v, v_new], dim=2)
            k, v = cache.k, cache.v
        else:  # cross-attention: keys/values were projected once per source (`init_cache`)
            k, v = cache.k, cache.v
        if self.recorded is not None:
            y = self._attend_with_weights(q, k, v, mask, causal)
        else:
            p = self.dropout if self.training else 0.0
            if q.device.type == "cpu" and q.dtype == torch.bfloat16:
                # The CPU's bf16 attention kernels ran ~10x slower than fp32 here (its backward above all:
                # RESULTS.md, "bf16 on the CPU"); the projections around them stay bf16.
                with torch.autocast("cpu", enabled=False):
                    y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=p,
                                                       is_causal=causal).to(q.dtype)
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
        return self.out_proj(y.transpose(1, 2).reshape(B, T, D))  # (B, T, d_model)

    def _attend_with_weights(self, q, k, v, mask, causal):
        """The explicit softmax(QK^T / sqrt(d_k)) V of §3.2.1, keeping the weights (for heatmaps)."""
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (B, h, T, S)
        if causal:
            T, S = scores.shape[-2:]
            scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool, device=q.device).tril(), float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        self.recorded.append(weights.detach())
        return weights @ v  # (B, h, T, d_head)


class FeedForward(nn.Module):
    """§3.3: FFN(x) = max(0, x W1 + b1) W2 + b2."""

    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.w1, self.w2, self.drop = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.drop(F.relu(self.w1(x))))


class Sublayer(nn.Module):
    """Residual + LayerNorm around one sublayer, §5.4: post-norm LayerNorm(x + Dropout(f(x))),
    or pre-norm x + Dropout(f(LayerNorm(x)))."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm, self.drop, self.pre_norm = nn.LayerNorm(d_model), nn.Dropout(dropout), pre_norm

    def forward(self, x: torch.Tensor, f) -> torch.Tensor:
        if self.pre_norm:
            return x + self.drop(f(self.norm(x)))
        return self.norm(x + self.drop(f(x)))


# --------------------------------------------------------------------------- layers and stacks


class EncoderLayer(nn.Module):
    """§3.1: self-attention, then feed-forward."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout)
        self.sub1, self.sub2 = (Sublayer(cfg.d_model, cfg.dropout, cfg.pre_norm) for _ in range(2))

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        x = self.sub1(x, lambda h: self.self_attn(h, h, src_mask))  # (B, S, d_model)
        return self.sub2(x, self.ff)


class DecoderLayer(nn.Module):
    """§3.1: masked self-attention, attention over the encoder output, feed-forward."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout)
        self.sub1, self.sub2, self.sub3 = (Sublayer(cfg.d_model, cfg.dropout, cfg.pre_norm) for _ in range(3))

    def forward(self, y, memory, src_mask, cache: LayerCache | None = None) -> torch.Tensor:
        if cache is None:  # whole prefix at once: causal mask
            y = self.sub1(y, lambda h: self.self_attn(h, h, causal=True))
        else:  # one new position: it may attend to everything cached so far
            y = self.sub1(y, lambda h: self.self_attn(h, h, cache=cache.self_kv, append=True))
        y = self.sub2(y, lambda h: self.cross_attn(h, memory, src_mask, cache=cache and cache.cross_kv))
        return self.sub3(y, self.ff)  # (B, T, d_model)


@dataclass
class LayerCache:
    self_kv: KVCache
    cross_kv: KVCache

    def reorder(self, index: torch.Tensor) -> None:
        self.self_kv.reorder(index)
        self.cross_kv.reorder(index)

    def reorder_beams(self, index: torch.Tensor, source_rows: torch.Tensor | None) -> None:
        """Beam search: the self-attention cache takes rows `index`; the cross-attention cache, whose
        rows are equal for all beams of a sentence, only changes when sentences leave (`source_rows`)."""
        self.self_kv.reorder(index)
        if source_rows is not None:
            self.cross_kv.reorder(source_rows)


# --------------------------------------------------------------------------- model


class Transformer(nn.Module):
    """Figure 1. `forward` is teacher-forced training; `encode` + `decode_step` is incremental decoding."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.vocab_size <= 0:
            raise ValueError("ModelConfig.vocab_size must be set (build_model(cfg, vocab_size=...) does it)")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD_ID)  # shared, §3.4
        self.pos = PositionalEncoding(cfg.d_model, cfg.max_positions)
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.layers))
        # pre-norm leaves the residual stream un-normalised: one final LayerNorm per stack
        self.enc_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        self.dec_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()

    def _embed(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        x = self.embed(tokens) * math.sqrt(self.cfg.d_model)  # §3.4: embeddings scaled by sqrt(d_model)
        return self.drop(self.pos(x, offset))  # (B, T, d_model)

    @staticmethod
    def source_mask(src: torch.Tensor) -> torch.Tensor:
        return (src != PAD_ID)[:, None, None, :]  # (B, 1, 1, S): keys that are not padding

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> memory (B, S, d_model), src_mask (B, 1, 1, S)."""
        src_mask = self.source_mask(src)
        x = self._embed(src)
        for layer in self.encoder:
            x = layer(x, src_mask)
        return self.enc_norm(x), src_mask

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """Whole target prefix at once (training, and the uncached 'naive' decoding): logits (B, T, V)."""
        y = self._embed(tgt_in)
        for layer in self.decoder:
            y = layer(y, memory, src_mask)
        return self.logits(self.dec_norm(y))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.embed.weight)  # tied output projection, §3.4: (B, T, V)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)  # (B, T, V)

    # ----------------------------------------------------------------- incremental decoding

    def init_cache(self, memory: torch.Tensor) -> list[LayerCache]:
        """Per decoder layer: an empty self-attention cache and the cross-attention keys/values,
        projected from the encoder output once per source (each (B, h, S, d_head))."""
        return [LayerCache(KVCache(), KVCache(*layer.cross_attn.project_kv(memory))) for layer in self.decoder]

    def decode_step(self, token: torch.Tensor, src_mask: torch.Tensor, cache: list[LayerCache], pos: int) -> torch.Tensor:
        """token (B, 1) at position `pos` -> logits (B, V); each self-attention cache grows by one position."""
        y = self._embed(token, offset=pos)  # (B, 1, d_model)
        for layer, layer_cache in zip(self.decoder, cache):
            y = layer(y, None, src_mask, layer_cache)
        return self.logits(self.dec_norm(y))[:, -1]  # (B, V)

    def attention_groups(self) -> dict[str, list[MultiHeadAttention]]:
        """The attention sublayers `record_attention` can keep weights of, by kind."""
        return {
            "encoder": [layer.self_attn for layer in self.encoder],
            "decoder": [layer.self_attn for layer in self.decoder],
            "cross": [layer.cross_attn for layer in self.decoder],
        }


Seq2Seq = Transformer | RNNSeq2Seq  # what `build_model` returns: one interface, two architectures


def build_model(cfg: ModelConfig, vocab_size: int | None = None) -> Seq2Seq:
    """The one factory: resolves the vocabulary size, picks the architecture (`cfg.arch`) and
    initialises weights (the RNN's: `mtcore.nmt.rnn.init_weights`).

    Transformer linear layers: Xavier-uniform (as the Annotated Transformer); the shared
    embedding: N(0, d_model^-0.5), so that after the sqrt(d_model) scaling inputs have unit
    variance and the tied output projection starts with small logits.
    """
    if vocab_size is not None:
        if cfg.vocab_size and cfg.vocab_size != vocab_size:
            raise ValueError(f"config `vocab_size` ({cfg.vocab_size}) differs from the tokenizer's ({vocab_size})")
        cfg = ModelConfig(**{**cfg.to_dict(), "vocab_size": vocab_size})
    if cfg.arch == "rnn":
        model = RNNSeq2Seq(cfg)
        init_rnn_weights(model)
        return model
    model = Transformer(cfg)
    for name, p in model.named_parameters():
        if p.dim() == 2 and name != "embed.weight":
            nn.init.xavier_uniform_(p)
        elif name.endswith(".bias"):
            nn.init.zeros_(p)
    nn.init.normal_(model.embed.weight, mean=0.0, std=cfg.d_model**-0.5)
    with torch.no_grad():
        model.embed.weight[PAD_ID].zero_()
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------- attention on demand


@contextlib.contextmanager
def record_attention(model: Seq2Seq):
    """Inside the block, attention sublayers keep their weights (slow path):

        with record_attention(model) as maps:
            model(src, tgt_in)
        maps["encoder"][layer]  # (B, heads, S, S) encoder self-attention (Transformer only)
        maps["cross"][layer]    # (B, heads, T, S) decoder attention over the source
        maps["decoder"][layer]  # (B, heads, T, T) decoder self-attention (Transformer only)

    The RNN has one attention, over the source: `maps == {"cross": [(B, 1, T, S)]}`.
    """
    groups = model.attention_groups()
    maps: dict[str, list[torch.Tensor]] = {}
    for attns in groups.values():
        for a in attns:
            a.recorded = []
    try:
        yield maps
    finally:
        for key, attns in groups.items():
            maps[key] = [torch.cat(a.recorded, dim=2) if a.recorded else None for a in attns]
            for a in attns:
                a.recorded = None


@torch.no_grad()
def attention_maps(model: Seq2Seq, src: torch.Tensor, tgt_in: torch.Tensor) -> dict[str, list[torch.Tensor]]:
    """Encoder self-attention (Transformer only) and decoder cross-attention (per layer, (B, heads, ., S)) for heatmaps,
    teacher-forced on a given translation `tgt_in` (BOS + tokens)."""
    was_training = model.training
    model.eval()
    with record_attention(model) as maps:
        model(src, tgt_in)
    model.train(was_training)
    return maps
