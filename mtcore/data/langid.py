"""Which language a text is in: py3langid (its model ships in the package), loaded once per process.

The cleaning's LanguageID rule judges each pair with it; the corpus readers ask it once per TSV or Parquet
file whether its src and tgt columns stand the other way round (a vi<TAB>en file read as en<TAB>vi trained
and scored a model backwards without a word)."""

from __future__ import annotations

import functools

_IDENTIFIERS: dict[tuple, object] = {}


@functools.lru_cache(maxsize=1)
def known_languages() -> tuple[str, ...]:
    """The 97 language codes py3langid's model knows."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return tuple(LanguageIdentifier.from_model_file(MODEL_FILE).nb_classes)


def language_identifier(languages: tuple[str, ...]):
    """py3langid restricted to `languages`, loaded once per process."""
    if languages not in _IDENTIFIERS:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        ident.set_languages(list(languages))
        _IDENTIFIERS[languages] = ident
    return _IDENTIFIERS[languages]


def columns_swapped(src: list[str], tgt: list[str], src_lang: str, tgt_lang: str, *, sample: int = 200,
                    min_rows: int = 20, share: float = 0.7) -> bool:
    """Whether the src column reads as `tgt_lang` and the tgt column as `src_lang`, each in at least `share` of
    up to `sample` rows spread over the file (pairs of at least two words a side, judged by py3langid restricted
    to the pair). A few swapped rows (the cleaning's `wrong_language`) never add up to it. Fewer than `min_rows`
    such pairs (a dev or test set of a few): every one of them must read the other way round on both sides. Fewer
    than 3, one language twice, or a language py3langid does not know: False, nothing is claimed."""
    base = lambda lang: lang.split("_")[0].split("-")[0].lower()  # noqa: E731 - pt_BR, zh-Hans
    pair = (base(src_lang), base(tgt_lang))
    rows = [i for i in range(len(src)) if len(src[i].split()) >= 2 and len(tgt[i].split()) >= 2]
    if len(rows) < 3 or pair[0] == pair[1] or not set(pair) <= set(known_languages()):
        return False
    if len(rows) < min_rows:  # a 3-pair test set read the wrong way round scored its model against its sources
        share = 1.0
    picked = rows[:: max(1, len(rows) // sample)][:sample]
    ident = language_identifier(pair)
    flipped_src = sum(ident.classify(src[i])[0] == pair[1] for i in picked)
    flipped_tgt = sum(ident.classify(tgt[i])[0] == pair[0] for i in picked)
    return min(flipped_src, flipped_tgt) >= share * len(picked)


def other_language(texts: list[str], lang: str, *, sample: int = 200, min_rows: int = 5) -> str | None:
    """The language `texts` read as, when most of them read as one language that is not `lang` and few as `lang`
    (up to `sample` texts of at least two words, by py3langid over all its languages); None otherwise, or when
    there are too few texts or py3langid does not know `lang`. An en-de model scored against Vietnamese references
    printed BLEU 0.00 and nothing else."""
    base = lang.split("_")[0].split("-")[0].lower()
    rows = [t for t in texts if len(t.split()) >= 2]
    if len(rows) < min_rows or base not in known_languages():
        return None
    picked = rows[:: max(1, len(rows) // sample)][:sample]
    ident = language_identifier(known_languages())
    votes: dict[str, int] = {}
    for text in picked:
        found = ident.classify(text)[0]
        votes[found] = votes.get(found, 0) + 1
    kin = next((g for g in CLOSE_LANGUAGES if base in g), {base})  # Croatian references read as Serbian
    top = max(votes, key=votes.get)
    if top not in kin and votes[top] >= 0.5 * len(picked) and sum(votes.get(k, 0) for k in kin) < 0.2 * len(picked):
        return top
    return None


# Languages py3langid confuses with each other on short texts: one of them read as another is not another pair.
CLOSE_LANGUAGES = ({"bs", "hr", "sr"}, {"id", "ms"}, {"da", "nb", "nn", "no"}, {"cs", "sk"}, {"es", "gl", "ca"},
                   {"pt", "gl"}, {"ru", "uk", "be", "bg", "mk"}, {"hi", "mr", "ne"}, {"zh", "ja"})
