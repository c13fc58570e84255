"""The attention RNN encoder-decoder the Transformer replaced (Bahdanau et al. 2015; Luong et al. 2015).

Built from the smallest parts up: attention -> encoder -> one decoder step -> model.
- Encoder: a bidirectional GRU or LSTM over the source, packed so that padding never
  reaches a real position (the backward direction starts at each sentence's last token);
  each direction has `rnn_hidden / 2` units, so an encoder state h̄_s has `rnn_hidden`.
- Decoder: a unidirectional GRU/LSTM of `rnn_hidden` units. At step t it reads the
  previous target embedding (and, with `input_feeding`, the previous attentional vector
  h̃_{t-1}, Luong §3.3), attends over the encoder states with its top output h_t, and
  forms h̃_t = tanh(W_c [c_t; h_t]) (Luong Eq. 5) of size `d_model`; logits = h̃_t E^T.
- Attention scores (`rnn_attention`): `dot` h_t·h̄_s and `general` h_t W_a h̄_s (Luong §3.1),
  `bahdanau` v_a·tanh(W_a h_t + U_a h̄_s) (Bahdanau Eq. A.1.2).

Deviations, all deliberate:
- the additive (Bahdanau) score is used in Luong's layout: the query is the current decoder
  output h_t rather than the previous state s_{t-1} (as OpenNMT's `mlp` attention), so that
  all three scores share one decoder;
- the decoder's initial state is Bahdanau's s_0 = tanh(W_s h̄_1^←) (§A.2.2), per layer (and
  for the LSTM cell state too): it needs only the encoder output, so `encode` returns the
  same (memory, src_mask) pair as the Transformer's;
- one shared embedding matrix (the joint SentencePiece vocabulary) for the encoder, the
  decoder and the output projection (tied, as the Transformer), inputs scaled by sqrt(d_model);
- teacher forcing with ratio `teacher_forcing` < 1 feeds, at each step and for the whole batch
  with probability 1 - ratio, the model's own previous argmax (the reference code's scheme);
  1.0 (the default) is plain teacher forcing.

The interface is the Transformer's, so training, checkpoints, decoding and heatmaps use
either: `forward(src, tgt_in)`, `encode`, `decode`, `logits`, `init_cache`, `decode_step`.
The decoding cache is one `RNNCache` (hidden state, last attentional vector, encoder states
and their projected keys); a step costs one position, and `reorder` follows the beams.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from mtcore.config import ModelConfig
from mtcore.nmt.tokenizer import PAD_ID

CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}


# --------------------------------------------------------------------------- parts


class Attention(nn.Module):
    """Global attention over all encoder states; scores per `kind` (module doc). Keys are projected
    once per source (`keys`), so a decoding step costs one query."""

    def __init__(self, kind: str, hidden: int):
        super().__init__()
        self.kind = kind
        if kind == "general":
            self.w_a = nn.Linear(hidden, hidden, bias=False)
        elif kind == "bahdanau":
            self.w_q = nn.Linear(hidden, hidden, bias=False)
            self.u_a = nn.Linear(hidden, hidden)
            self.v_a = nn.Linear(hidden, 1, bias=False)
        self.recorded: list[torch.Tensor] | None = None  # set by `model.record_attention`

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        """memory (B, S, H) -> keys (B, S, H)."""
        if self.kind == "general":
            return self.w_a(memory)
        if self.kind == "bahdanau":
            return self.u_a(memory)
        return memory

    def forward(self, q: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """q (B, T, H), keys/memory (B, S, H), mask (B, S) True = a real token -> context (B, T, H)."""
        if self.kind == "bahdanau":
            scores = self.v_a(torch.tanh(self.w_q(q)[:, :, None] + keys[:, None])).squeeze(-1)  # (B, T, S)
        else:
            scores = q @ keys.transpose(1, 2)  # (B, T, S)
        weights = scores.masked_fill(~mask[:, None, :], float("-inf")).softmax(dim=-1)
        if self.recorded is not None:
            self.recorded.append(weights.detach()[:, None])  # (B, 1 "head", T, S), like the Transformer's maps
        return weights @ memory  # (B, T, H)


class Encoder(nn.Module):
    """Bidirectional GRU/LSTM; each direction has hidden/2 units, outputs concatenated (Bahdanau §3.2)."""

    def __init__(self, cfg: ModelConfig, hidden: int):
        super().__init__()
        self.rnn = CELLS[cfg.rnn_cell](cfg.d_model, hidden // 2, cfg.layers, batch_first=True, bidirectional=True,
                                       dropout=cfg.dropout if cfg.layers > 1 else 0.0)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """x (B, S, d_model), lengths (B,) -> memory (B, S, hidden), zeros at padding."""
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        return out


@dataclass
class RNNCache:
    """Decoder state during incremental decoding: the recurrent state, the last attentional vector
    (input feeding), and the encoder states with their attention keys (fixed per source)."""

    hidden: torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # (L, B, H), or (h, c) for the LSTM
    feed: torch.Tensor  # (B, 1, d_model) h̃_{t-1}
    memory: torch.Tensor  # (B, S, H)
    keys: torch.Tensor  # (B, S, H)

    def reorder(self, index: torch.Tensor) -> None:
        """Select batch rows (beam reordering, or dropping finished sentences)."""
        if isinstance(self.hidden, tuple):
            self.hidden = tuple(h.index_select(1, index) for h in self.hidden)
        else:
            self.hidden = self.hidden.index_select(1, index)
        self.feed, self.memory, self.keys = (t.index_select(0, index) for t in (self.feed, self.memory, self.keys))

    def reorder_beams(self, index: torch.Tensor, source_rows: torch.Tensor | None) -> None:
        """Beam search: the recurrent state follows the beams; the encoder states and keys, equal for
        every beam of a sentence, only change when sentences leave (`source_rows`)."""
        if isinstance(self.hidden, tuple):
            self.hidden = tuple(h.index_select(1, index) for h in self.hidden)
        else:
            self.hidden = self.hidden.index_select(1, index)
        self.feed = self.feed.index_select(0, index)
        if source_rows is not None:
            self.memory, self.keys = self.memory.index_select(0, source_rows), self.keys.index_select(0, source_rows)


# --------------------------------------------------------------------------- model


class RNNSeq2Seq(nn.Module):
    """Encoder-decoder with attention; the Transformer's interface (see the module doc)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.vocab_size <= 0:
            raise ValueError("ModelConfig.vocab_size must be set (build_model(cfg, vocab_size=...) does it)")
        self.cfg = cfg
        H = self.hidden = cfg.rnn_hidden or cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD_ID)  # shared and tied
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = Encoder(cfg, H)
        n_states = cfg.layers * (2 if cfg.rnn_cell == "lstm" else 1)
        self.bridge = nn.Linear(H // 2, n_states * H)  # s_0 = tanh(W_s h̄_1^←), Bahdanau §A.2.2
        dec_in = cfg.d_model * (2 if cfg.input_feeding else 1)
        self.decoder = CELLS[cfg.rnn_cell](dec_in, H, cfg.layers, batch_first=True,
                                           dropout=cfg.dropout if cfg.layers > 1 else 0.0)
        self.attention = Attention(cfg.rnn_attention, H)
        self.combine = nn.Linear(2 * H, cfg.d_model, bias=False)  # W_c, Luong Eq. 5

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.drop(self.embed(tokens) * math.sqrt(self.cfg.d_model))  # (B, T, d_model)

    @staticmethod
    def source_mask(src: torch.Tensor) -> torch.Tensor:
        return (src != PAD_ID)[:, None, None, :]  # (B, 1, 1, S), the Transformer's shape

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> memory (B, S, hidden), src_mask (B, 1, 1, S)."""
        src_mask = self.source_mask(src)
        lengths = src_mask[:, 0, 0].sum(dim=1).clamp(min=1)
        return self.encoder(self._embed(src), lengths), src_mask

    def init_cache(self, memory: torch.Tensor) -> list[RNNCache]:
        """The decoder's starting state from the encoder output: one `RNNCache` (a list, as the Transformer's)."""
        B, L, H = memory.size(0), self.cfg.layers, self.hidden
        s0 = torch.tanh(self.bridge(memory[:, 0, H // 2 :]))  # backward direction at the first token: (B, n*H)
        states = s0.view(B, -1, L, H).permute(1, 2, 0, 3).contiguous()  # (1|2, L, B, H)
        hidden = (states[0], states[1]) if self.cfg.rnn_cell == "lstm" else states[0]
        feed = memory.new_zeros(B, 1, self.cfg.d_model)
        return [RNNCache(hidden, feed, memory, self.attention.keys(memory))]

    def _attend(self, out: torch.Tensor, cache: RNNCache, mask: torch.Tensor) -> torch.Tensor:
        """Decoder outputs h_t (B, T, H) -> attentional vectors h̃_t (B, T, d_model)."""
        context = self.attention(out, cache.keys, cache.memory, mask)  # (B, T, H)
        return torch.tanh(self.combine(torch.cat([context, out], dim=-1)))

    def _step(self, y: torch.Tensor, cache: RNNCache, mask: torch.Tensor) -> torch.Tensor:
        """One target position: embedded y (B, 1, d_model) -> h̃_t (B, 1, d_model); the cache advances."""
        x = torch.cat([y, cache.feed], dim=-1) if self.cfg.input_feeding else y
        out, cache.hidden = self.decoder(x, cache.hidden)  # (B, 1, H)
        cache.feed = self._attend(out, cache, mask)
        return cache.feed

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(self.drop(h), self.embed.weight)  # tied output projection: (B, T, V)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """Whole target prefix (training; the uncached 'naive' decoding): logits (B, T, V)."""
        cache = self.init_cache(memory)[0]
        mask = src_mask[:, 0, 0]  # (B, S)
        free_running = self.training and self.cfg.teacher_forcing < 1.0
        if not self.cfg.input_feeding and not free_running:  # all positions at once: one RNN call
            out, _ = self.decoder(self._embed(tgt_in), cache.hidden)  # (B, T, H)
            return self.logits(self._attend(out, cache, mask))
        outs, token = [], tgt_in[:, :1]
        for t in range(tgt_in.size(1)):
            if t == 0 or not free_running or torch.rand(()) < self.cfg.teacher_forcing:
                token = tgt_in[:, t : t + 1]  # gold previous token (teacher forcing)
            outs.append(self._step(self._embed(token), cache, mask))
            if free_running:
                token = self.logits(outs[-1]).argmax(dim=-1).detach()  # (B, 1) the model's own guess
        return self.logits(torch.cat(outs, dim=1))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)  # (B, T, V)

    def decode_step(self, token: torch.Tensor, src_mask: torch.Tensor, cache: list[RNNCache], pos: int) -> torch.Tensor:
        """token (B, 1) -> logits (B, V); the recurrent state advances by one position (`pos` unused)."""
        return self.logits(self._step(self._embed(token), cache[0], src_mask[:, 0, 0]))[:, -1]

    def attention_groups(self) -> dict[str, list[nn.Module]]:
        """The attention modules whose weights `record_attention` keeps: only the decoder's, over the source."""
        return {"cross": [self.attention]}


def init_weights(model: RNNSeq2Seq) -> None:
    """Recurrent weights U(-0.1, 0.1) (Luong et al. 2015 §4.1), other matrices Xavier-uniform, biases 0;
    the shared embedding N(0, d_model^-0.5) as the Transformer's (unit-variance inputs after scaling)."""
    for name, p in model.named_parameters():
        if name.startswith(("encoder.rnn.", "decoder.")):
            nn.init.uniform_(p, -0.1, 0.1)
        elif p.dim() == 2 and name != "embed.weight":
            nn.init.xavier_uniform_(p)
        elif name.endswith(".bias"):
            nn.init.zeros_(p)
    nn.init.normal_(model.embed.weight, mean=0.0, std=model.cfg.d_model**-0.5)
    with torch.no_grad():
        model.embed.weight[PAD_ID].zero_()
