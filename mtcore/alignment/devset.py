"""The near-miss development set: correct catalog pairs mixed with near-miss misalignments, labelled.

Built from the held-out splits (`data/test.parquet`, `data/dev.parquet`: catalogs the
built-in encoder never trains on) by `pipelines/build_near_miss_dev.py` and shipped as
`data/near_miss_dev.parquet` (provenance in `data/SOURCES.md`). Columns: `src`, `tgt`,
`origin`, `id`, `label` (1 = misaligned), `kind`.

Each misaligned row *replaces* its correct target, as noise does in a real catalog:
- `version`: the translation of the most similar *other* English message of the same
  catalog (word Jaccard ≥ `min_jaccard`, different words, different translation): what
  a catalog keeps when the English changed and the translation did not ("Show backup
  files" with the translation of "Show hidden files"). The other message's own pair is
  dropped, as the old message is gone from a real catalog (otherwise "the same Vietnamese
  twice" would give the answer away).
- `neighbour`: the next message's translation (an off-by-one shift).
- `partial`: the translation with its last clause / last words dropped.
- `swap`: the translation with a number, option, placeholder or name changed.

The kinds are made with the same recipes as the calibration negatives
(`mtcore.alignment.negatives`) but the `version` kind keeps only close matches; the dev
set's rows never reach the encoder's training data (the splits are excluded there).
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

from mtcore.alignment import negatives

log = logging.getLogger(__name__)

MIX = {"version": 0.55, "neighbour": 0.15, "partial": 0.15, "swap": 0.15}  # mostly outdated translations, as in real catalogs


def _jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / max(1, len(a | b))


def build_near_miss_dev(table: pa.Table, share: float = 0.17, seed: int = 0, min_jaccard: float = 0.5) -> pa.Table:
    """`table` (src, tgt, origin, id) with about `share` of its rows misaligned by the kinds in `MIX`."""
    if not 0 < share < 1:
        raise ValueError(f"share {share}: a share of the rows in (0, 1)")
    rng = np.random.default_rng(seed)
    table = table.sort_by([("origin", "ascending"), ("id", "ascending")])
    src, tgt, origin = table["src"].to_pylist(), table["tgt"].to_pylist(), table["origin"].to_pylist()
    n = len(src)
    sets = negatives.word_sets(src)
    fuzzy = negatives.fuzzy_partners(src, tgt, origin)
    close = np.array([j >= 0 and _jaccard(sets[i], sets[j]) >= min_jaccard for i, j in enumerate(fuzzy)])
    neighbour = negatives.neighbour_partners(tgt, origin)
    new_tgt, label, kind = list(tgt), np.zeros(n, np.int8), ["ok"] * n
    free, gone = np.ones(n, bool), np.zeros(n, bool)
    for k, frac in MIX.items():
        want = int(round(share * n * frac))
        eligible = np.flatnonzero(free & (close if k == "version" else neighbour >= 0 if k == "neighbour" else True))
        for i in rng.permutation(eligible):
            if want == 0:
                break
            if not free[i] or (k == "version" and not free[fuzzy[i]]):
                continue
            if k == "version":
                new = tgt[fuzzy[i]]
            elif k == "neighbour":
                new = tgt[neighbour[i]]
            elif k == "partial":
                new = negatives.partial_translation(tgt[i], rng)
            else:
                pool = [tgt[j] for j in range(max(0, i - 25), min(n, i + 25)) if origin[j] == origin[i]]
                new = negatives.swap_detail(tgt[i], pool, rng)
            if not new or new == tgt[i]:
                continue
            new_tgt[i], label[i], kind[i], free[i] = new, 1, k, False
            if k == "version":  # the older message is gone from the catalog: its own pair must not stay beside
                gone[fuzzy[i]] = True
                free[fuzzy[i]] = False
            want -= 1
    keep = ~gone | (label == 1)
    out = pa.table({
        "src": pa.array(src, pa.string()),
        "tgt": pa.array(new_tgt, pa.string()),
        "origin": pa.array(origin, pa.string()),
        "id": table["id"],
        "label": pa.array(label),
        "kind": pa.array(kind, pa.string()),
    })
    return out.filter(pa.array(keep))


# --------------------------------------------------------------------------- real outdated translations

# Function words and auxiliaries: "The data were not available" → "are not available", "hasn't got" → "doesn't
# have" leave a translation right. Negation is kept ("n't" reads as "not").
_STOPWORDS = frozenset("a an the of to in on at for as by with and or this that it its your you "
                       "is are was were be been being am has have had having got do does did".split())


def content_words(text: str) -> Counter:
    """The words a translation has to carry: lower case, accents and accelerators (`_File`, `&Open`) gone,
    English function words left out (a translation of "playing Konrad" still translates "playing as Konrad")."""
    text = unicodedata.normalize("NFKD", text.lower())
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = re.sub(r"(?<![^\W_])[_&](?=[^\W_])", "", text)  # an accelerator before a word's first letter
    text = re.sub(r"n['’]t\b", " not", text).replace("cannot", "can not")
    return Counter(w for w in re.findall(r"[^\W_]+", text) if w not in _STOPWORDS)


def outdated(new: str, previous: str) -> bool:
    """Does a translation of `previous` miss what `new` says? Content words changed, not only spelling: words
    joined or split ("Cuttle Fish" → "Cuttlefish"), case, punctuation, quotes and markup spacing keep it."""
    a, b = content_words(new), content_words(previous)
    return a != b and "".join(sorted(a.elements())) != "".join(sorted(b.elements())) and \
        "".join(re.findall(r"[^\W_]", new.lower())) != "".join(re.findall(r"[^\W_]", previous.lower()))


def build_outdated_dev(catalogs: list[tuple[str, list]], share: float = 0.17, per_catalog: int = 40, seed: int = 0,
                       is_target_language=None, per_source: int = 150) -> pa.Table:
    """Real outdated translations, mixed with the same catalogs' correct pairs.

    `catalogs`: (origin, entries read with fuzzy ones, `mtcore.data.catalogs.read_po(include_fuzzy=True)`). A
    misaligned row is a fuzzy entry whose translation msgmerge kept from an earlier English (`#| msgid`) that
    differs in content words (`outdated`): the new English beside the old translation, as a catalog compiled
    with fuzzy entries, or a corpus harvested from translation memories, holds it. At most `per_catalog` of them
    a catalog and `per_source` a source package (the catalogs' origins up to the first `/`; a game's catalogs
    hold thousands); beside them, drawn from the same catalog's translated entries,
    enough correct pairs that about `share` of the rows are misaligned. `is_target_language(texts) -> mask`
    drops fuzzy translations that are not in the target language (left-over junk, another kind of noise).
    Columns: src, tgt, origin, id, label (1 = misaligned), kind (`outdated` / `ok`), previous (the English the
    target translates)."""
    if not 0 < share < 1:
        raise ValueError(f"share {share}: a share of the rows in (0, 1)")
    rng = np.random.default_rng(seed)
    rows: list[tuple[str, str, str, str, int, str, str]] = []
    per_package: Counter = Counter()
    for c in rng.permutation(len(catalogs)):  # which catalogs of a big package fill its quota: by chance
        origin, entries = catalogs[c]
        room = min(per_catalog, per_source - per_package[origin.split("/")[0]])
        bad = [e for e in entries if e.fuzzy and e.previous and e.plural_index == 0 and not e.context
               and e.msgid.strip() and outdated(e.msgid, e.previous)]
        if bad and is_target_language is not None:
            ok_lang = is_target_language([e.msgstr for e in bad])
            bad = [e for e, ok in zip(bad, ok_lang) if ok]
        if not bad or room <= 0:
            continue
        bad = [bad[i] for i in sorted(rng.choice(len(bad), min(room, len(bad)), replace=False))]
        per_package[origin.split("/")[0]] += len(bad)
        taken = {e.msgstr for e in bad} | {e.msgid for e in bad}
        good = [e for e in entries if not e.fuzzy and e.msgstr not in taken and e.msgid not in taken]
        want = min(len(good), int(round(len(bad) * (1 - share) / share)))
        good = [good[i] for i in sorted(rng.choice(len(good), want, replace=False))]
        rows += [(e.msgid, e.msgstr, origin, f"{origin}:{e.line}", 1, "outdated", e.previous) for e in bad]
        rows += [(e.msgid, e.msgstr, origin, f"{origin}:{e.line}", 0, "ok", e.msgid) for e in good]
    rows.sort(key=lambda r: (r[2], r[3]))
    names = ("src", "tgt", "origin", "id", "label", "kind", "previous")
    cols = list(zip(*rows)) if rows else [[] for _ in names]
    types = (pa.string(),) * 4 + (pa.int8(),) + (pa.string(),) * 2
    return pa.table({n: pa.array(list(c), t) for n, c, t in zip(names, cols, types)})


SKIP_SOURCES = {"iso-codes": "place and language names: a fuzzy entry is a new transliteration, not a new text"}


def source_catalogs(source: str, root, po_files) -> list[tuple[str, list]]:
    """(origin, entries with fuzzy ones) for each readable Vietnamese .po of a source package unpacked under `root`;
    origin `SOURCE/DIR` (`dpkg/po`, `gimp/po-plug-ins`; KDE's `po/vi/okular.po`: `okular/po/okular`), the
    tarball's top folder (name-version) left out."""
    from mtcore.data.catalogs import CatalogError, read_po

    out = []
    for path in po_files:
        rel = Path(path).relative_to(root)
        folders = [*rel.parts[1:-2], rel.stem] if rel.parent.name == "vi" else rel.parts[1:-1]  # KDE: po/vi/DOMAIN.po
        origin = "/".join([source, *folders])
        try:
            out.append((origin, read_po(path, include_fuzzy=True)))
        except CatalogError as err:  # a broken catalog of one package is no reason to stop: say so and go on
            log.warning("skipped %s", err)
    return out


def outdated_dev_from_packages(packages: list[str], cache: Path, share: float = 0.17, per_catalog: int = 40,
                               seed: int = 0, progress=None) -> tuple[pa.Table, dict[str, str]]:
    """`build_outdated_dev` on the source catalogs of binary `packages` (fetched into `cache` once, see
    `mtcore.data.corpus_build.source_vi_catalogs`); returns (the set, {source package: why it was not fetched}).
    `progress(line)` hears one line per source package. Nothing fetched at all is a `UsageError` naming the fix."""
    from mtcore.checks import UsageError
    from mtcore.data.corpus_build import looks_vietnamese, source_packages, source_vi_catalogs

    sources = sorted(set(source_packages(packages).values()) - set(SKIP_SOURCES))
    catalogs, failed = [], {}
    for i, source in enumerate(sources, 1):
        files, why = source_vi_catalogs(source, cache)
        if why:
            failed[source] = why
        catalogs += source_catalogs(source, cache / source, files)
        if progress is not None:
            progress(f"[{i}/{len(sources)}] {source}: {len(files)} vi.po")
    if not catalogs:  # never write an empty set over the shipped one
        why = f" (e.g. {next(iter(failed.values()))})" if failed else ""
        raise UsageError(f"no Vietnamese source catalog was fetched from {len(sources)} source packages{why}; "
                         "`apt-get source` needs a `deb-src` line beside the `deb` one in apt's sources, then `apt-get update`")
    dev = build_outdated_dev(catalogs, share, per_catalog, seed,
                             is_target_language=lambda texts: [looks_vietnamese(t) for t in texts])
    return dev, failed
