"""Corpus BLEU and chrF over sacreBLEU (Post 2018): never re-implemented, the signature kept beside the score.

Inputs are detokenised text (what `Tokenizer.decode` returns); sacreBLEU applies its
own tokenisation, chosen by the target language as sacreBLEU's command line chooses it
(`bleu_tokenize`): `13a` for Vietnamese and other space-separated languages (Vietnamese
syllables are space-separated already), `zh` for Chinese, MeCab for Japanese and Korean
when installed. chrF needs none.

Before sacreBLEU, both sides are NFC and lose the invisible format characters that
`tokenizer.normalize` removes from every training text (`_comparable`); the signature says so
after sacreBLEU's own (`|mtcore:nfc+no-invisible`).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF

from mtcore.nmt.tokenizer import INVISIBLE


def evenly_spaced(total: int, limit: int) -> list[int]:
    """The indices of `limit` of `total` rows spread evenly over them (all when `limit` is 0 or ≥ `total`): the
    rows a dev or test limit scores. Held-out sets are stored grouped by catalog, so their first rows were one or
    two packages (`dev_limit: 150` was one catalog of nine); every (total/limit)-th row covers them all in
    proportion, and the same rows every time."""
    if not limit or limit >= total:
        return list(range(total))
    return [i * total // limit for i in range(limit)]


def spread_over(items: Sequence, limit: int) -> list:
    """`limit` of `items` at `evenly_spaced` positions."""
    return [items[i] for i in evenly_spaced(len(items), limit)]


BLEU_TOKENIZE = "13a"  # sacreBLEU's default (WMT's mteval-v13a)
# sacreBLEU's `-tok` default per target language (`-tl`); the MeCab ones need sacrebleu[ja] / [ko]
_BY_LANGUAGE = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
# without MeCab: Japanese has no spaces, so characters (tok:char, in the signature); Korean spaces its words
_WITHOUT_MECAB = {"ja-mecab": "char", "ko-mecab": "13a"}
_UNSPACED = {"th", "lo", "km", "my", "bo", "dz"}  # scripts written without spaces between words: characters


def bleu_tokenize(lang: str | None) -> str:
    """sacreBLEU's tokenizer for references in `lang` (an ISO 639 code such as "vi", "zh", "zh-TW", "ja_JP").

    With 13a, a Chinese or Japanese sentence is one or two "words": BLEU near 0 whatever the model, and the
    dev BLEU that picks checkpoints and stops training says nothing.
    """
    base = (lang or "").replace("_", "-").split("-")[0].lower()
    choice = _BY_LANGUAGE.get(base, "char" if base in _UNSPACED else BLEU_TOKENIZE)
    return choice if _usable(choice) else _WITHOUT_MECAB.get(choice, BLEU_TOKENIZE)


@functools.lru_cache(maxsize=None)
def _usable(tokenize: str) -> bool:
    try:
        BLEU(tokenize=tokenize)
    except RuntimeError:  # sacreBLEU's "requires extra dependencies"
        return False
    return True


@dataclass(frozen=True)
class Score:
    name: str  # "bleu" | "chrf"
    score: float  # 0-100
    signature: str  # e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0|mtcore:nfc+no-invisible"

    def __str__(self) -> str:
        return f"{self.name.upper()} = {self.score:.2f} ({self.signature})"


_NO_INVISIBLE = str.maketrans("", "", INVISIBLE)
PREPROCESSING = "mtcore:nfc+no-invisible"  # appended to sacreBLEU's signature: what `_comparable` did first


def _comparable(texts: Sequence[str]) -> list[str]:
    """NFC without the tokenizer's invisible characters, as the model's output is. A reference typed with combining
    marks (Vietnamese e + U+0301) matched no hypothesis character for character (measured: BLEU 50.7 → 0.8 on the
    same translations in NFD); one with a soft hyphen, a zero-width space (Khmer, Thai) or a leading RLM (Arabic)
    lost the words around it, which a model, never trained on them, cannot write ("Open the co\u00adoperative file":
    BLEU 35.4 against the same words without it)."""
    return [unicodedata.normalize("NFC", t).translate(_NO_INVISIBLE) for t in texts]


def _signature(metric: BLEU | CHRF) -> str:
    return f"{metric.get_signature()}|{PREPROCESSING}"


def _refs(refs: Sequence[str] | Sequence[Sequence[str]], n: int) -> list[list[str]]:
    """One reference per hypothesis (a list of str), or several reference streams (a list of lists)."""
    streams = [_comparable(refs)] if refs and isinstance(refs[0], str) else [_comparable(r) for r in refs]
    for s in streams:
        if len(s) != n:
            raise ValueError(f"{n} hypotheses but a reference stream of {len(s)} lines")
    return streams


def corpus_bleu(
    hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]], *, tokenize: str = BLEU_TOKENIZE, lowercase: bool = False
) -> Score:
    metric = BLEU(tokenize=tokenize, lowercase=lowercase)
    result = metric.corpus_score(_comparable(hyps), _refs(refs, len(hyps)))
    return Score("bleu", float(result.score), _signature(metric))


def corpus_chrf(hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]], *, word_order: int = 0) -> Score:
    """chrF (Popović 2015); word_order=2 gives chrF++."""
    metric = CHRF(word_order=word_order)
    result = metric.corpus_score(_comparable(hyps), _refs(refs, len(hyps)))
    return Score("chrf", float(result.score), _signature(metric))


def score_translations(hyps: Sequence[str], refs: Sequence[str], prefix: str = "test",
                       tgt_lang: str | None = None) -> dict[str, float | str]:
    """The platform's metric names: `{prefix}/bleu`, `{prefix}/chrf`, and their signatures."""
    bleu, chrf = corpus_bleu(hyps, refs, tokenize=bleu_tokenize(tgt_lang)), corpus_chrf(hyps, refs)
    return {
        f"{prefix}/bleu": bleu.score,
        f"{prefix}/chrf": chrf.score,
        f"{prefix}/bleu_signature": bleu.signature,
        f"{prefix}/chrf_signature": chrf.signature,
    }
