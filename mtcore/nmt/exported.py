"""Translate with an exported model, fed exactly as mtcore feeds its own decoder.

Same sources (`encode_sources`: normalised text, pieces + EOS), same length-sorted batches,
the same output limit a * src_len + b for each sentence (batches group sentences of one limit), the
same detokenisation and a blank translation for a blank text, so that differences come from the
runtime alone. The length penalty and bound default to the run's, as the export recorded them
(`decoding` in mtcore_export.json beside the tokenizer's spm.model), else DecodeConfig's:

    translator = ctranslate2.Translator(OUT)            # an `mtcore.export --to ctranslate2` directory
    translate_ctranslate2(translator, Tokenizer(OUT / "spm.model"), texts, beam=5)
    model = MarianMTModel.from_pretrained(OUT)          # an `mtcore.export --to hf` directory
    translate_hf(model, tokenizer, texts, beam=5)
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence

import torch

from mtcore.config import DecodeConfig
from mtcore.nmt.batching import pad
from mtcore.nmt.decoding import blanks_kept, encode_sources, length_limit
from mtcore.nmt.export import INFO
from mtcore.nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer


def _batches(sources: list[list[int]], batch_size: int, a: float, b: int, max_positions: int):
    """(indices, sources, limit) per length-sorted batch whose sentences share one limit: mtcore limits each
    sentence by its own length (`decoding.max_lengths`), and the runtimes take one limit per batch. A batch with a
    long source let a short one's greedy output run on where mtcore's stops. The limit given is the tokens a
    runtime may generate before it stops: mtcore's limit counts the EOS it forces at the last position, the
    runtimes stop there without one, so theirs is one fewer (0: mtcore's output is empty)."""
    def limit_of(i: int) -> int:
        return length_limit(len(sources[i]), a, b, max_positions) - 1

    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    for limit, group in itertools.groupby(order, key=limit_of):
        group = list(group)
        for start in range(0, len(group), batch_size):
            idx = group[start : start + batch_size]
            yield idx, [sources[i] for i in idx], limit


def _exported_positions(tokenizer: Tokenizer) -> int:
    """The exported model's `max_positions`, from the export's record; CTranslate2 does not expose it."""
    info = tokenizer.path.parent / INFO
    try:
        return int(json.loads(info.read_text(encoding="utf-8"))["model"]["max_positions"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{info}: the export's record, which holds the model's max_positions, is missing or damaged "
                         f"({err}); load the tokenizer from the export folder, or pass max_positions=") from None


def _settings(tokenizer: Tokenizer, **given: float | None) -> dict:
    """The `given` settings; one that is None is the run's, from the export's record beside the tokenizer, else
    DecodeConfig's (a tokenizer loaded from elsewhere, or an export written before the record had them)."""
    info = tokenizer.path.parent / INFO
    recorded = {}
    if info.is_file():
        try:
            recorded = json.loads(info.read_text(encoding="utf-8")).get("decoding") or {}
        except (ValueError, AttributeError) as err:
            raise ValueError(f"{info}: the export's record is damaged ({err}); export the checkpoint again, or pass "
                             f"{', '.join(k + '=' for k in given)}") from None
    return {k: v if v is not None else recorded.get(k, getattr(DecodeConfig, k)) for k, v in given.items()}


def translate_ctranslate2(
    translator,  # ctranslate2.Translator over an mtcore export
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    beam: int = 1,
    len_penalty: float | None = None,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
    batch_size: int = 32,
    max_positions: int | None = None,
) -> list[str]:
    """The export adds `</s>` to sources itself (`add_source_eos`), so pieces go in without it.
    CTranslate2's length penalty is |Y|^alpha, not mtcore's GNMT one (`mtcore.nmt.export`). `max_positions`:
    the model's position table (default: read from the mtcore_export.json beside the tokenizer's spm.model)."""
    sp = tokenizer.sp
    max_positions = max_positions or _exported_positions(tokenizer)
    kw = _settings(tokenizer, len_penalty=len_penalty, max_len_a=max_len_a, max_len_b=max_len_b)
    banned = [[sp.id_to_piece(PAD_ID)], [sp.id_to_piece(BOS_ID)]]  # mtcore never generates them

    def decode(batch, limit: int) -> list[list[int]]:
        pieces = [[sp.id_to_piece(i) for i in ids[:-1]] for ids in batch]
        # max_input_length=0: sources come cut to the position table, with a warning (`encode_sources`); CTranslate2
        # would cut them again at 1024 tokens, silently, for a model with a longer table
        results = translator.translate_batch(
            pieces, beam_size=beam, length_penalty=kw["len_penalty"], max_decoding_length=limit,
            max_input_length=0, suppress_sequences=banned, max_batch_size=0,
        )
        return [[sp.piece_to_id(p) for p in r.hypotheses[0]] for r in results]

    return _translated(tokenizer, texts, decode, batch_size, kw, max_positions)


def _translated(tokenizer: Tokenizer, texts: Sequence[str], decode, batch_size: int, kw: dict, max_positions: int) -> list[str]:
    """Both runtimes' loop: sources cut to the position table, batched by length with their own output bound,
    `decode(batch, limit)` -> token ids per source; a blank source gives a blank translation."""
    def filled(some: list[str]) -> list[str]:
        sources = encode_sources(tokenizer, some, max_len=max_positions - 1)
        out: list[list[int]] = [[] for _ in sources]
        for idx, batch, limit in _batches(sources, batch_size, kw["max_len_a"], kw["max_len_b"], max_positions):
            if limit:
                for i, ids in zip(idx, decode(batch, limit)):
                    out[i] = ids
        return tokenizer.decode(out)
    return blanks_kept(texts, filled)


@torch.inference_mode()
def translate_hf(
    model,  # transformers.MarianMTModel over an mtcore export
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    beam: int = 1,
    len_penalty: float | None = None,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
    batch_size: int = 32,
) -> list[str]:
    """`generate` with the export's generation config (BOS start, PAD/BOS suppressed, early stopping
    once `beam` hypotheses finish, as mtcore); HF's length penalty is |Y|^alpha."""
    max_positions = model.config.max_position_embeddings
    kw = _settings(tokenizer, len_penalty=len_penalty, max_len_a=max_len_a, max_len_b=max_len_b)

    def decode(batch, limit: int) -> list[list[int]]:
        src = pad(batch)
        # greedy: HF warns about an unused penalty
        beam_kw = dict(length_penalty=kw["len_penalty"]) if beam > 1 else {}
        gen = model.generate(input_ids=src, attention_mask=src != PAD_ID, num_beams=beam, do_sample=False,
                             max_new_tokens=limit, max_length=None, **beam_kw)
        return [row[: row.index(EOS_ID)] if EOS_ID in row else [t for t in row if t != PAD_ID]
                for row in gen[:, 1:].tolist()]  # without the decoder start

    return _translated(tokenizer, texts, decode, batch_size, kw, max_positions)
