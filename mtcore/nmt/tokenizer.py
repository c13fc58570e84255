"""Joint SentencePiece vocabulary shared by English and Vietnamese.

One model covers both languages so that the Transformer can tie its embeddings.
Text is NFC-normalised by us and SentencePiece runs with the `identity` rule, so
that Vietnamese diacritics (precomposed, NFC) round-trip exactly; byte fallback
means no character ever decodes as `⁇`.
"""

from __future__ import annotations

import io
import random
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from mtcore.errors import MtcoreError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
BT_TAG = "<bt>"  # marks synthetic (back-translated) sources: tagged BT, Caswell et al. 2019
NEWLINE = "<nl>"  # reserved (its id stays): models trained before whitespace was folded used it for newlines
PLACEHOLDERS = tuple(f"<ph{i}>" for i in range(10))  # for masking format specifiers before translation
RESERVED_SYMBOLS = (BT_TAG, NEWLINE, *PLACEHOLDERS)


_WHITESPACE = re.compile(r"\s+")  # Unicode whitespace: \t \n \xa0, every Zs, U+2028/2029, U+0085
# Invisible format characters that carry no text: zero-width space, word joiner, BOM / zero-width no-break space,
# soft hyphen, left/right-to-left marks, bidi embeddings and isolates. Removed (the cleaning stage too); they
# became byte pieces. ZWJ/ZWNJ stay: Persian, Indic scripts and emoji need them.
INVISIBLE = "\u200b\u2060\ufeff\u00ad\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_INVISIBLE = re.compile(f"[{INVISIBLE}]")


class TokenizerError(MtcoreError, ValueError):
    pass


def normalize(text: str) -> str:
    """NFC, no invisible format characters, and every run of whitespace (newlines, tabs, Unicode spaces) as one space.

    The same rule as the cleaning stage's `whitespace` normalisation, applied wherever text meets
    the tokenizer (training, dev and test sets, translation input), so that a model never sees at
    inference a token its training text could not contain: a dev set read raw kept newlines and
    tabs that the cleaned training set had folded into spaces.
    """
    return _WHITESPACE.sub(" ", _INVISIBLE.sub("", unicodedata.normalize("NFC", text))).strip()


def denormalize(text: str) -> str:
    """Model output as text; a model trained before newlines were folded may still write `<nl>`."""
    return text.replace(f" {NEWLINE} ", "\n").replace(f"{NEWLINE} ", "\n").replace(f" {NEWLINE}", "\n").replace(NEWLINE, "\n")


class Tokenizer:
    """A loaded SentencePiece model with the platform's special ids."""

    def __init__(self, model_path: str | Path):
        model_path = Path(model_path)
        if not model_path.is_file():
            raise TokenizerError(f"{model_path}: SentencePiece model not found")
        self.path = model_path
        self.sp = spm.SentencePieceProcessor(model_file=str(model_path))
        for name, expected in (("pad", PAD_ID), ("unk", UNK_ID), ("bos", BOS_ID), ("eos", EOS_ID)):
            actual = getattr(self.sp, f"{name}_id")()
            if actual != expected:
                raise TokenizerError(f"{model_path}: {name} id is {actual}, mtcore expects {expected}")

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    @property
    def bt_tag_id(self) -> int:
        return self.sp.piece_to_id(BT_TAG)

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids without BOS/EOS (the model adds those where it needs them)."""
        return self.sp.encode([normalize(t) for t in texts], out_type=int)

    def encode_pieces(self, texts: list[str]) -> list[list[str]]:
        return self.sp.encode([normalize(t) for t in texts], out_type=str)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Detokenised text; special ids (pad/bos/eos) are dropped."""
        special = {PAD_ID, BOS_ID, EOS_ID}
        return [denormalize(self.sp.decode([i for i in seq if i not in special])) for seq in ids]

    def model_bytes(self) -> bytes:
        return self.path.read_bytes()


MAX_SENTENCES = 2_000_000  # sentences a tokenizer trains on at most (SentencePiece's memory grows with them)


def train_tokenizer(
    texts: Iterable[str],
    model_path: str | Path,
    *,
    vocab_size: int = 8000,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    max_sentences: int = MAX_SENTENCES,
    seed_sentencepiece_size: int = 1_000_000,
) -> Tokenizer:
    """Train a joint model on `texts` (both languages mixed) and write it to `model_path`.

    `character_coverage=1.0` because Vietnamese uses many precomposed letters that
    must all be in the vocabulary rather than fall back to bytes.
    """
    if model_type not in ("unigram", "bpe"):
        raise TokenizerError(f"model_type must be 'unigram' or 'bpe', not {model_type!r}")
    sentences = [normalize(t) for t in texts if t and t.strip()]
    if not sentences:
        raise TokenizerError("cannot train a tokenizer on an empty corpus")
    model_path = Path(model_path)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    try:
        _train(sentences, buffer, vocab_size, model_type, character_coverage, max_sentences, seed_sentencepiece_size)
    except RuntimeError as err:
        if "Vocabulary size is smaller than required_chars" in str(err):
            raise TokenizerError(
                f"vocab_size {vocab_size} is too small for this corpus: it needs room for 256 byte pieces, "
                f"{len(RESERVED_SYMBOLS) + 4} special symbols and every character; raise it (train, tune: "
                f"job.vocab_size=N; train_encoder: --vocab-size N), or for Chinese or Japanese in train and tune lower "
                f"the character coverage (job.character_coverage=0.9995) ({err})"
            ) from None
        raise
    model_path.write_bytes(buffer.getvalue())
    return Tokenizer(model_path)


def _train(sentences, buffer, vocab_size, model_type, character_coverage, max_sentences, seed_sentencepiece_size):
    # A corpus over max_sentences is sampled here, not by SentencePiece: its sampler draws from the clock (even after
    # spm.set_random_generator_seed), and the same corpus gave another vocabulary in every process.
    if len(sentences) > max_sentences:
        sentences = random.Random(0).sample(sentences, max_sentences)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=buffer,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        normalization_rule_name="identity",
        byte_fallback=True,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        user_defined_symbols=list(RESERVED_SYMBOLS),
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        seed_sentencepiece_size=seed_sentencepiece_size,
        hard_vocab_limit=False,  # tiny test corpora cannot always fill the requested vocabulary
        minloglevel=2,
        num_threads=2,
    )
