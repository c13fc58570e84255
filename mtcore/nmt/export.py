"""Export a Transformer checkpoint to CTranslate2 or to a Hugging Face `MarianMTModel`.

    python -m mtcore.export --to ctranslate2 CHECKPOINT_DIR OUT [--quantization int8]
    python -m mtcore.export --to hf CHECKPOINT_DIR OUT

Both exports translate what mtcore translates: greedy output is identical token for token
when they are fed normalised text and stopped at mtcore's per-sentence length limit, as
`mtcore.nmt.exported` does (tests/test_export.py); their own default limits are longer.
Where mtcore's Transformer (`mtcore.nmt.model`) deviates from what the target formats
assume, and how each deviation is mapped:

- positions: mtcore interleaves sin and cos (pe[:, 0::2] = sin, pe[:, 1::2] = cos, §3.5 as
  the Annotated Transformer writes it); CTranslate2 and Marian concatenate [sin | cos].
  CTranslate2 takes mtcore's table as an explicit `position_encodings.encodings`; Marian
  always rebuilds its own table (it is never saved), so the HF export permutes the model
  dimension instead: every weight that reads or writes the residual stream is reordered
  so that mtcore's dimension 2i lands on i and 2i+1 on d/2 + i. LayerNorm is
  permutation-equivariant and attention heads are untouched, so the function is the same;
- one embedding matrix for the encoder, the decoder and the output projection (joint
  SentencePiece vocabulary); no output bias. Marian: `share_encoder_decoder_embeddings`,
  tied `lm_head`, zero `final_logits_bias`;
- embeddings scaled by sqrt(d_model): CTranslate2 `scale_embeddings`, Marian `scale_embedding`;
- post-norm (the default) or pre-norm with one final LayerNorm per stack (`pre_norm`):
  CTranslate2 has both layouts; Marian is post-norm only, so a pre-norm model cannot go to HF;
- LayerNorm epsilon 1e-5 (PyTorch's default; CTranslate2 would assume 1e-6);
- special ids: PAD 0 `<pad>`, UNK 1, BOS 2 `<s>`, EOS 3 `</s>`. The decoder starts from BOS
  (Marian's default start is PAD); a source is its pieces + `</s>` and no BOS
  (CTranslate2: `add_source_eos`; Marian's tokenizer appends `</s>` itself);
- mtcore never generates PAD or BOS (their log-probability is -inf): `suppress_sequences` /
  the generation config's `suppress_tokens` do the same;
- text is NFC-normalised and every run of whitespace (newlines, tabs, Unicode spaces) is one
  space before SentencePiece (`mtcore.nmt.tokenizer.normalize`); the exported tokenizers do not do that, so feed them
  normalised text, or use `mtcore.nmt.exported`, which does. MarianTokenizer also applies
  Moses punctuation rules when `sacremoses` is installed: leave it out;
- beam search: mtcore's length penalty is GNMT's ((5 + |Y|) / 6)^alpha, CTranslate2's and
  HF's is |Y|^alpha, so with a length penalty beam output may differ slightly (greedy does
  not). Without one, HF (`early_stopping=True`: stop once `beam` hypotheses have finished,
  as mtcore) gives mtcore's beam output, except for hypotheses cut at the length limit
  (mtcore ends them with a forced, scored EOS; HF stops without one); CTranslate2 searches on
  a little longer and may return a hypothesis the model scores higher.

Decoding settings: the HF generation config takes the run's length penalty (`train.len_penalty`, as its
test BLEU was decoded); mtcore_export.json records it with the run's bound a * src_len + b
(`train.max_len_a/b`), which `mtcore.nmt.exported` uses and neither runtime can hold.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from mtcore import checks
from mtcore.console import DefaultsHelpFormatter, add_common_options, program
from mtcore.errors import entry_point
from mtcore.nmt.checkpoint import SPM, Checkpoint, checkpoint_dir, load_checkpoint
from mtcore.config import DecodeConfig
from mtcore.nmt.decoding import run_decode
from mtcore.nmt.model import Transformer
from mtcore.nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

FORMATS = ("ctranslate2", "hf")
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16")
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, used by every LayerNorm of mtcore's Transformer
INFO = "mtcore_export.json"  # written next to the export: where it came from and how to feed it


class ExportError(ValueError):
    """A checkpoint that cannot be exported as asked; the message says why."""


def load_transformer(directory: str | Path) -> Checkpoint:
    ckpt = load_checkpoint(directory)
    if not isinstance(ckpt.model, Transformer):
        raise ExportError(f"{directory}: a `{ckpt.model_cfg.arch}` checkpoint; only the Transformer can be exported "
                          "(CTranslate2 and Marian have no equivalent of mtcore's attention RNN)")
    return ckpt


def _prepare_out(out: Path, force: bool, source: Path | None = None) -> None:
    if source is not None:  # --force removes OUT: never the checkpoint, or a folder holding it, or one inside it
        src, dst = source.resolve(), out.resolve()
        if dst == src or src.is_relative_to(dst) or dst.is_relative_to(src):
            raise ExportError(f"{out}: this is, holds or lies inside the checkpoint {source}; choose an OUT outside it")
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out}: a file, not a directory; choose another OUT")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise ExportError(f"{out}: exists and is not empty (--force replaces it)")
        # --force replaces an earlier export, never a folder of other files (the workspace with its MLflow store,
        # given as OUT with a runs:/ source, went whole)
        checks.replaceable_dir(out, "an mtcore export", lambda p: (p / INFO).is_file(), name="OUT")
        checks.output_apart(out, {}, name="OUT")


@contextmanager
def _written_whole(out: Path, force: bool, source: Path) -> Iterator[Path]:
    """A sibling folder to write the export into, put in OUT's place only once complete: an export stopped
    halfway (Ctrl-C, a full disk, a converter's error) leaves OUT as it was, not a folder of model files
    without mtcore_export.json that --force would then refuse to replace."""
    _prepare_out(out, force, source)
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)  # an earlier stopped export's
    partial.mkdir(parents=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)  # an earlier export, or an empty folder (checked above)
    os.replace(partial, out)


def _write_info(ckpt: Checkpoint, out: Path, fmt: str, decode: DecodeConfig | None = None, **extra) -> None:
    """The export's record; `decoding`: the length penalty and bound to translate as the run did (`run_decode`; the
    checkpoint does not keep the run's test beam, so no beam is recorded)."""
    decode = decode or run_decode(ckpt.train_cfg)
    info = {"format": fmt, "checkpoint": str(Path(ckpt.path).resolve()), "step": ckpt.meta.get("step"),
            "direction": ckpt.model_cfg.direction, "model": ckpt.model_cfg.to_dict(), "tokenizer": ckpt.meta["tokenizer"],
            "input": "NFC text, whitespace runs as one space (mtcore.nmt.tokenizer.normalize), SentencePiece pieces + '</s>'",
            "decoding": {k: getattr(decode, k) for k in ("len_penalty", "max_len_a", "max_len_b")}, **extra}
    (out / INFO).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _record_origin(out: Path, origin: str) -> None:
    info = json.loads((out / INFO).read_text(encoding="utf-8"))
    (out / INFO).write_text(json.dumps(info | {"checkpoint": origin}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- CTranslate2


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _linear(spec, layer: torch.nn.Linear) -> None:
    spec.weight, spec.bias = _np(layer.weight), _np(layer.bias)


def _fused(spec, layers: list[torch.nn.Linear]) -> None:
    """CTranslate2 fuses self-attention Q|K|V (and cross-attention K|V) into one matrix."""
    spec.weight = np.concatenate([_np(layer.weight) for layer in layers])
    spec.bias = np.concatenate([_np(layer.bias) for layer in layers])


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _ffn(spec, ff, norm) -> None:
    _norm(spec.layer_norm, norm)
    _linear(spec.linear_0, ff.w1)
    _linear(spec.linear_1, ff.w2)


def ctranslate2_spec(model: Transformer, pieces: list[str]):
    """mtcore weights in a `ctranslate2.specs.TransformerSpec`; CTranslate2's LayerNorm inside each
    attention/FFN spec is the one of the Sublayer around it (before or after, as `pre_norm` says)."""
    from ctranslate2.specs import TransformerSpec

    cfg = model.cfg
    spec = TransformerSpec.from_config(cfg.layers, cfg.heads, pre_norm=cfg.pre_norm)
    embed, pe = _np(model.embed.weight), _np(model.pos.pe)  # pe: (max_positions, d_model), interleaved
    for stack in (spec.encoder, spec.decoder):
        stack.scale_embeddings = True  # §3.4, as mtcore's `_embed`
        stack.position_encodings.encodings = pe
    spec.encoder.embeddings[0].weight = embed
    spec.decoder.embeddings.weight = embed
    spec.decoder.projection.weight = embed  # tied, no bias
    if cfg.pre_norm:
        _norm(spec.encoder.layer_norm, model.enc_norm)
        _norm(spec.decoder.layer_norm, model.dec_norm)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder):
        a = layer.self_attn
        _norm(layer_spec.self_attention.layer_norm, layer.sub1.norm)
        _fused(layer_spec.self_attention.linear[0], [a.q_proj, a.k_proj, a.v_proj])
        _linear(layer_spec.self_attention.linear[1], a.out_proj)
        _ffn(layer_spec.ffn, layer.ff, layer.sub2.norm)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder):
        a, c = layer.self_attn, layer.cross_attn
        _norm(layer_spec.self_attention.layer_norm, layer.sub1.norm)
        _fused(layer_spec.self_attention.linear[0], [a.q_proj, a.k_proj, a.v_proj])
        _linear(layer_spec.self_attention.linear[1], a.out_proj)
        _norm(layer_spec.attention.layer_norm, layer.sub2.norm)
        _linear(layer_spec.attention.linear[0], c.q_proj)
        _fused(layer_spec.attention.linear[1], [c.k_proj, c.v_proj])
        _linear(layer_spec.attention.linear[2], c.out_proj)
        _ffn(layer_spec.ffn, layer.ff, layer.sub3.norm)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    config = spec.config
    config.unk_token, config.bos_token, config.eos_token = pieces[UNK_ID], pieces[BOS_ID], pieces[EOS_ID]
    config.decoder_start_token = pieces[BOS_ID]
    config.add_source_bos, config.add_source_eos = False, True
    config.layer_norm_epsilon = LAYER_NORM_EPS
    return spec


def to_ctranslate2(checkpoint: str | Path, out: str | Path, *, quantization: str | None = None, force: bool = False) -> Path:
    """Write a CTranslate2 model directory (model.bin, config.json, shared_vocabulary.json) plus
    spm.model and mtcore_export.json; `quantization` as CTranslate2's converters take it."""
    from ctranslate2.converters.converter import Converter

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(f"--quantization {quantization!r}: choose from {list(QUANTIZATIONS)}")
    ckpt, out = load_transformer(checkpoint), Path(out)
    pieces = [ckpt.tokenizer.sp.id_to_piece(i) for i in range(ckpt.tokenizer.vocab_size)]

    class _Loaded(Converter):  # CTranslate2's converter base: validation, quantization, writing
        def _load(self):
            return ctranslate2_spec(ckpt.model, pieces)

    with _written_whole(out, force, ckpt.path) as partial:
        _Loaded().convert(str(partial), quantization=quantization, force=True)
        shutil.copyfile(ckpt.path / SPM, partial / SPM)
        _write_info(ckpt, partial, "ctranslate2", quantization=quantization or "float32")
    return out


# --------------------------------------------------------------------------- Hugging Face Marian


def concat_permutation(d_model: int) -> torch.Tensor:
    """Index p with new[k] = old[p[k]]: mtcore's interleaved sin/cos dimensions in Marian's [sin | cos] order."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def marian_config(model: Transformer, max_length: int):
    from transformers import MarianConfig

    cfg = model.cfg
    return MarianConfig(
        vocab_size=cfg.vocab_size, decoder_vocab_size=cfg.vocab_size, d_model=cfg.d_model,
        encoder_layers=cfg.layers, decoder_layers=cfg.layers,
        encoder_attention_heads=cfg.heads, decoder_attention_heads=cfg.heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function="relu",
        max_position_embeddings=cfg.max_positions, scale_embedding=True,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,  # inference export
        pad_token_id=PAD_ID, eos_token_id=EOS_ID, bos_token_id=BOS_ID, decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None,  # Marian's default forces EOS at max_length; mtcore does not
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True, max_length=max_length,
    )


def marian_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """mtcore's weights under Marian's names, residual-stream dimensions permuted (module doc)."""
    p = concat_permutation(model.cfg.d_model)
    state: dict[str, torch.Tensor] = {}

    def reads(name: str, layer: torch.nn.Linear) -> None:  # input is the residual stream
        state[f"{name}.weight"], state[f"{name}.bias"] = layer.weight[:, p], layer.bias

    def writes(name: str, layer: torch.nn.Linear) -> None:  # output is added to the residual stream
        state[f"{name}.weight"], state[f"{name}.bias"] = layer.weight[p], layer.bias[p]

    def norm(name: str, ln: torch.nn.LayerNorm) -> None:
        state[f"{name}.weight"], state[f"{name}.bias"] = ln.weight[p], ln.bias[p]

    def attention(name: str, a) -> None:
        for proj in ("q_proj", "k_proj", "v_proj"):
            reads(f"{name}.{proj}", getattr(a, proj))
        writes(f"{name}.out_proj", a.out_proj)

    embed = model.embed.weight[:, p]
    for name in ("model.shared", "model.encoder.embed_tokens", "model.decoder.embed_tokens", "lm_head"):
        state[f"{name}.weight"] = embed
    for i, layer in enumerate(model.encoder):
        pre = f"model.encoder.layers.{i}"
        attention(f"{pre}.self_attn", layer.self_attn)
        norm(f"{pre}.self_attn_layer_norm", layer.sub1.norm)
        reads(f"{pre}.fc1", layer.ff.w1)
        writes(f"{pre}.fc2", layer.ff.w2)
        norm(f"{pre}.final_layer_norm", layer.sub2.norm)
    for i, layer in enumerate(model.decoder):
        pre = f"model.decoder.layers.{i}"
        attention(f"{pre}.self_attn", layer.self_attn)
        norm(f"{pre}.self_attn_layer_norm", layer.sub1.norm)
        attention(f"{pre}.encoder_attn", layer.cross_attn)
        norm(f"{pre}.encoder_attn_layer_norm", layer.sub2.norm)
        reads(f"{pre}.fc1", layer.ff.w1)
        writes(f"{pre}.fc2", layer.ff.w2)
        norm(f"{pre}.final_layer_norm", layer.sub3.norm)
    return {k: v.detach().clone().float() for k, v in state.items()}


def _marian_tokenizer(ckpt: Checkpoint, out: Path):
    """A MarianTokenizer over mtcore's one SentencePiece model (source and target alike)."""
    from transformers import MarianTokenizer

    sp = ckpt.tokenizer.sp
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    tmp = out / ".tokenizer"
    tmp.mkdir(parents=True)
    (tmp / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    with warnings.catch_warnings():  # "pip install sacremoses": its punctuation rules are not mtcore's, better absent
        warnings.filterwarnings("ignore", message=".*sacremoses")
        tok = MarianTokenizer(source_spm=str(ckpt.path / SPM), target_spm=str(ckpt.path / SPM), vocab=str(tmp / "vocab.json"),
                              source_lang=ckpt.model_cfg.src_lang, target_lang=ckpt.model_cfg.tgt_lang,
                              unk_token=sp.id_to_piece(UNK_ID), eos_token=sp.id_to_piece(EOS_ID),
                              pad_token=sp.id_to_piece(PAD_ID), model_max_length=ckpt.model_cfg.max_positions - 1)
    tok.save_pretrained(str(out))
    shutil.rmtree(tmp)
    return tok


def to_hf(checkpoint: str | Path, out: str | Path, *, force: bool = False, beam: int = DecodeConfig.beam,
          len_penalty: float | None = None) -> Path:
    """Write a `MarianMTModel` directory (`save_pretrained`: config, safetensors weights, generation
    config) with a `MarianTokenizer`, spm.model and mtcore_export.json. Post-norm models only.
    `len_penalty` (default: the run's, `run_decode`) goes into the generation config."""
    from transformers import GenerationConfig, MarianMTModel

    ckpt, out = load_transformer(checkpoint), Path(out)
    told = {} if len_penalty is None else {"len_penalty": len_penalty}
    decode = run_decode(ckpt.train_cfg).replace(beam=beam, **told)
    if ckpt.model_cfg.pre_norm:
        raise ExportError(f"{checkpoint}: a pre-norm Transformer; Marian (HF) is post-norm only: export it with "
                          "--to ctranslate2, which has both layouts")
    max_length = ckpt.model_cfg.max_positions - 1
    hf = MarianMTModel(marian_config(ckpt.model, max_length)).eval()
    own = hf.state_dict()
    state = marian_state_dict(ckpt.model)
    state["final_logits_bias"] = torch.zeros_like(own["final_logits_bias"])
    for name in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"):
        state[name] = own[name]  # Marian's own [sin | cos] table: the permutation made it mtcore's
    missing = sorted(set(own) - set(state))
    if missing:
        raise ExportError(f"Marian parameters this converter does not fill: {missing[:5]} (transformers version?)")
    hf.load_state_dict(state, strict=True)
    hf.generation_config = GenerationConfig(
        decoder_start_token_id=BOS_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
        suppress_tokens=[PAD_ID, BOS_ID],  # never generated by mtcore
        num_beams=decode.beam, length_penalty=decode.len_penalty, early_stopping=True, max_length=max_length,
    )
    from transformers.utils import logging as hf_logging

    with _written_whole(out, force, ckpt.path) as partial:
        hf_logging.disable_progress_bar()  # "Writing model shards: 100%" of a one-file model, past -q: nothing to see
        try:
            hf.save_pretrained(str(partial))
        finally:
            hf_logging.enable_progress_bar()
        _marian_tokenizer(ckpt, partial)
        shutil.copyfile(ckpt.path / SPM, partial / SPM)
        _write_info(ckpt, partial, "hf", decode, architecture="MarianMTModel")
    return out


# --------------------------------------------------------------------------- command line


def export(fmt: str, checkpoint: str | Path, out: str | Path, *, quantization: str | None = None, force: bool = False) -> Path:
    if fmt not in FORMATS:
        raise ExportError(f"--to {fmt!r}: choose from {list(FORMATS)}")
    if fmt == "hf":
        if quantization not in (None, "float32"):  # HF weights stay as trained
            raise ExportError("--quantization applies to --to ctranslate2 only")
        return to_hf(checkpoint, out, force=force)
    return to_ctranslate2(checkpoint, out, quantization=quantization, force=force)


@entry_point
def main(argv: list[str] | None = None, *, resolve: Callable[[str], Path] | None = None) -> int:
    """`resolve` turns a non-directory reference (an MLflow `runs:/…` URI) into a local checkpoint
    directory; the `mtcore.export` entry point passes the tracking layer's."""
    parser = argparse.ArgumentParser(prog=program("python -m mtcore.export"), description=__doc__.split("\n")[0],
                                     formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--to", required=True, choices=FORMATS, default=argparse.SUPPRESS, help="target format")
    parser.add_argument("model", metavar="RUN_OR_DIR", help="checkpoint directory, or an MLflow runs:/RUN_ID/PATH URI")
    parser.add_argument("out", metavar="OUT", help="output directory")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default="float32", help="CTranslate2 weight type")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    add_common_options(parser)
    args = parser.parse_args(argv)
    try:
        source = checkpoint_dir(args.model, resolve)
        if not source.is_dir():
            raise ExportError(f"{args.model}: checkpoint directory not found")
        out = export(args.to, source, args.out, quantization=args.quantization, force=args.force)
        if args.model.startswith(("runs:/", "models:/")):  # the export names what the user gave, not a download's temporary folder
            _record_origin(out, args.model)
    except ValueError as err:  # ExportError, CheckpointError, FetchError: messages that name the culprit
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ImportError as err:  # the converters' libraries are an optional extra
        print(f"error: {(err.name or 'a converter library').split('.')[0]} is not installed: pip install 'mtcore[export]'", file=sys.stderr)
        return 2
    print(f"exported {args.model} -> {out} ({args.to}{', ' + args.quantization if args.to == 'ctranslate2' else ''})")
    return 0
