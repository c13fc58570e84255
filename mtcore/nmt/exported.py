"""Translate with an exported model, fed exactly as mtcore feeds its own decoder.

Same sources (`encode_sources`: normalised text, pieces + EOS), same length-sorted batches,
the same output limit a * src_len + b for each sentence (batches group sentences of one limit) and
the same detokenisation, so that differences come from the runtime alone:

    translator = ctranslate2.Translator(OUT)            # an `mtcore.export --to ctranslate2` directory
    translate_ctranslate2(translator, Tokenizer(OUT / "spm.model"), texts, beam=5)
    model = MarianMTModel.from_pretrained(OUT)          # an `mtcore.export --to hf` directory
    translate_hf(model, tokenizer, texts, beam=5)
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence

import torch

from mtcore.nmt.batching import pad
from mtcore.nmt.decoding import DEFAULT_LEN_PENALTY, DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B, encode_sources
from mtcore.nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer


def _batches(sources: list[list[int]], batch_size: int, a: float, b: int, max_positions: int):
    """(indices, sources, limit) per length-sorted batch whose sentences share one limit: mtcore limits each
    sentence by its own length (`decoding.max_lengths`), and the runtimes take one limit per batch. A batch with a
    long source let a short one's greedy output run on where mtcore's stops. The limit given is the tokens a
    runtime may generate before it stops: mtcore's limit counts the EOS it forces at the last position, the
    runtimes stop there without one, so theirs is one fewer (0: mtcore's output is empty)."""
    def limit_of(i: int) -> int:
        return max(min(math.floor(a * len(sources[i])) + b, max_positions - 1), 1) - 1

    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    for limit, group in itertools.groupby(order, key=limit_of):
        group = list(group)
        for start in range(0, len(group), batch_size):
            idx = group[start : start + batch_size]
            yield idx, [sources[i] for i in idx], limit


def _exported_positions(tokenizer: Tokenizer) -> int:
    """The exported model's `max_positions`, from the export's record; CTranslate2 does not expose it."""
    info = tokenizer.path.parent / "mtcore_export.json"
    try:
        return int(json.loads(info.read_text(encoding="utf-8"))["model"]["max_positions"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{info}: the export's record, which holds the model's max_positions, is missing or damaged "
                         f"({err}); load the tokenizer from the export folder, or pass max_positions=") from None


def translate_ctranslate2(
    translator,  # ctranslate2.Translator over an mtcore export
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    beam: int = 1,
    len_penalty: float = DEFAULT_LEN_PENALTY,
    max_len_a: float = DEFAULT_MAX_LEN_A,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    batch_size: int = 32,
    max_positions: int | None = None,
) -> list[str]:
    """The export adds `</s>` to sources itself (`add_source_eos`), so pieces go in without it.
    CTranslate2's length penalty is |Y|^alpha, not mtcore's GNMT one (`mtcore.nmt.export`). `max_positions`:
    the model's position table (default: read from the mtcore_export.json beside the tokenizer's spm.model)."""
    sp = tokenizer.sp
    max_positions = max_positions or _exported_positions(tokenizer)
    sources = encode_sources(tokenizer, texts, max_len=max_positions - 1)
    out: list[list[int]] = [[] for _ in sources]
    banned = [[sp.id_to_piece(PAD_ID)], [sp.id_to_piece(BOS_ID)]]  # mtcore never generates them
    for idx, batch, limit in _batches(sources, batch_size, max_len_a, max_len_b, max_positions):
        if limit == 0:
            continue
        pieces = [[sp.id_to_piece(i) for i in ids[:-1]] for ids in batch]
        results = translator.translate_batch(
            pieces, beam_size=beam, length_penalty=len_penalty, max_decoding_length=limit,
            suppress_sequences=banned, max_batch_size=0,
        )
        for i, r in zip(idx, results):
            out[i] = [sp.piece_to_id(p) for p in r.hypotheses[0]]
    return tokenizer.decode(out)


@torch.inference_mode()
def translate_hf(
    model,  # transformers.MarianMTModel over an mtcore export
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    beam: int = 1,
    len_penalty: float = DEFAULT_LEN_PENALTY,
    max_len_a: float = DEFAULT_MAX_LEN_A,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    batch_size: int = 32,
) -> list[str]:
    """`generate` with the export's generation config (BOS start, PAD/BOS suppressed, early stopping
    once `beam` hypotheses finish, as mtcore); HF's length penalty is |Y|^alpha."""
    max_positions = model.config.max_position_embeddings
    sources = encode_sources(tokenizer, texts, max_len=max_positions - 1)
    out: list[list[int]] = [[] for _ in sources]
    for idx, batch, limit in _batches(sources, batch_size, max_len_a, max_len_b, max_positions):
        if limit == 0:
            continue
        src = pad(batch)
        beam_kw = dict(length_penalty=len_penalty) if beam > 1 else {}  # greedy: HF warns about an unused penalty
        gen = model.generate(input_ids=src, attention_mask=src != PAD_ID, num_beams=beam, do_sample=False,
                             max_new_tokens=limit, max_length=None, **beam_kw)
        for i, row in zip(idx, gen[:, 1:].tolist()):  # drop the decoder start
            out[i] = row[: row.index(EOS_ID)] if EOS_ID in row else [t for t in row if t != PAD_ID]
    return tokenizer.decode(out)
