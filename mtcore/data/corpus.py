"""Parallel-corpus readers and writer: the platform's data contract.

A parallel corpus is an Arrow table with at least `src`, `tgt` (str), `origin`
(where the pair came from) and a stable `id`. Readers accept Parquet (a file or
a directory of files, such as a stage's `kept/`), TSV (`src<TAB>tgt`), a pair of
plain-text files named by their common prefix (`train` → `train.en` +
`train.vi`, the Moses/IWSLT layout) and gettext `.po`/`.mo` catalogs.

Bad input fails loudly with the file (and line) at fault. The only quiet fix-ups are a UTF-8 BOM and
CRLF line ends, which are normalised, and strings stored in another Arrow layout (a dictionary, a view).
Fix-ups with a warning: null src/tgt values in Parquet read as empty text (the cleaning stage rejects them
as `empty`); a TSV header row (`src<TAB>tgt`) skipped; stored `origin`/`id` values that are null, numbers
or repeated, made strings or derived. Under non-strict TSV reading, malformed lines are not dropped but
returned as reason-coded rejects.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mtcore.data import paths
from mtcore.data.files import read_bytes
from mtcore.data.langid import columns_swapped
from mtcore.errors import MtcoreError, name_path

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("src", "tgt", "origin", "id")
SCHEMA = pa.schema([(name, pa.string()) for name in REQUIRED_COLUMNS])


class CorpusError(MtcoreError, ValueError):
    """Input that cannot be read as a parallel corpus; the message names the file (and line)."""


@dataclass(frozen=True)
class LoadedCorpus:
    """Rows that were read, and rows that could not be (only under non-strict reading)."""

    table: pa.Table
    rejects: pa.Table


def empty_rejects() -> pa.Table:
    from mtcore.data.ledger import REJECT_SCHEMA

    return REJECT_SCHEMA.empty_table()


# --------------------------------------------------------------------------- text files


def _decode_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file (gzip'd if it ends in .gz) without their ends; BOM and CRLF are normalised."""
    raw = read_bytes(path, CorpusError)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):  # Excel's "Unicode Text" and Windows' Notepad write UTF-16
        raise CorpusError(f"{path}: UTF-16 text (byte-order mark {raw[:2].hex(' ')}); mtcore reads UTF-8: convert it, "
                          f"e.g. iconv -f UTF-16 -t UTF-8 {path.name} > {path.stem}.utf8{path.suffix}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line_no = raw[: err.start].count(b"\n") + 1
        raise CorpusError(f"{path}:{line_no}: invalid UTF-8 (byte {raw[err.start]:#04x} at offset {err.start})") from None
    # Lines end at \n (as for wc -l and the Moses tools); a lone \r inside a line stays text, which the
    # cleaning's whitespace normalisation turns into a space, so line numbers are those of the file.
    if ends_lines_in_bare_cr(text):  # one line, pairs merged
        raise CorpusError(f"{path}: its lines end in a bare carriage return (\\r, old Mac line ends), which would read "
                          f"as one line; convert them to \\n (e.g. tr '\\r' '\\n')")
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start an empty one
    return lines


def ends_lines_in_bare_cr(text: str) -> bool:
    """A text whose lines end in a bare \r (old Mac line ends), which would read as one line."""
    segments = sum(1 for x in text.split("\r") if x.strip()) if "\r" in text and "\n" not in text.rstrip("\r") else 0
    return segments >= 3 or (segments == 2 and text.endswith("\r"))


def _table(src: list[str], tgt: list[str], origin: str, ids: list[str]) -> pa.Table:
    return pa.table({"src": src, "tgt": tgt, "origin": [origin] * len(src), "id": ids}, schema=SCHEMA)


# Column names that say a side, as a TSV header or a Parquet column: a role word or the side's language (its
# code or English name), alone or with a word such as `text` around it (`source_text`, `text_en`, `en_sentence`).
ROLE_WORDS = {"src": {"src", "source", "original", "msgid"}, "tgt": {"tgt", "trg", "target", "translation", "msgstr"}}
_FILLER_WORDS = {"text", "texts", "sentence", "sentences", "sent", "segment", "segments", "seg", "string", "str", "txt"}
_LANGUAGE_NAMES = {"en": "english", "vi": "vietnamese", "de": "german", "fr": "french", "es": "spanish",
                   "it": "italian", "pt": "portuguese", "nl": "dutch", "ru": "russian", "zh": "chinese",
                   "ja": "japanese", "ko": "korean", "ar": "arabic", "th": "thai", "id": "indonesian"}


_PAIRS_OF_WORDS = (("source", "target"), ("src", "trg"), ("original", "translation"), ("msgid", "msgstr"))


def _said(name: str) -> str:
    """A column name without its filler words: `source_text` → source, `Text-EN` → en."""
    return "_".join(w for w in re.split(r"[^0-9a-z]+", name.strip().lower()) if w and w not in _FILLER_WORDS)


def _tiers(src_lang: str, tgt_lang: str):
    """(name → "src"/"tgt"/None) matchers, surest first: the languages' codes, a pair of role words, a role word,
    the languages' English names, then any of these with filler words around (`column_role`)."""
    langs = {"src": src_lang.lower().replace("-", "_"), "tgt": tgt_lang.lower().replace("-", "_")}
    names = {role: _LANGUAGE_NAMES.get(lang.split("_")[0]) for role, lang in langs.items()}

    def exact(table):
        return lambda n: next((role for role, words in table.items() if n.strip().lower().replace("-", "_") in words), None)

    yield exact({role: {lang, lang.split("_")[0]} for role, lang in langs.items()})  # zh_CN's column may say zh
    for a, b in _PAIRS_OF_WORDS:
        yield exact({"src": {a}, "tgt": {b}})
    yield exact(ROLE_WORDS)
    yield exact({role: {name} for role, name in names.items() if name})
    yield lambda n: column_role(n, src_lang, tgt_lang)


def column_role(name: str, src_lang: str = "en", tgt_lang: str = "vi") -> str | None:
    """"src", "tgt" or None: the side a column's name says, for a corpus read src_lang → tgt_lang, filler words
    (`text`, `sentence`) left out."""
    said = _said(name)
    for role, lang in (("src", src_lang), ("tgt", tgt_lang)):
        lang = lang.lower().replace("-", "_")
        if said in ROLE_WORDS[role] or said in (lang, lang.split("_")[0], _LANGUAGE_NAMES.get(lang.split("_")[0])):
            return role
    return None


def pair_columns(names: list[str], src_lang: str = "en", tgt_lang: str = "vi") -> tuple[str, str] | None:
    """The (source, target) columns of a table: `src`/`tgt`, else the first of `_tiers` under which exactly one
    column says each side (`en`/`vi` before `source`/`target` before `english`/`vietnamese` before `source_text`;
    so a provenance column `source` beside `en` and `vi`, or a column `id` beside `source` and `target` in an en-id
    corpus, is no side). None when no tier names both sides once."""
    if {"src", "tgt"} <= set(names):
        return "src", "tgt"
    for role_of in _tiers(src_lang, tgt_lang):
        by_role: dict[str, list[str]] = {"src": [], "tgt": []}
        for name in names:
            if role := role_of(name):
                by_role[role].append(name)
        if len(by_role["src"]) == 1 and len(by_role["tgt"]) == 1:
            return by_role["src"][0], by_role["tgt"][0]
    return None


def _csv_quoted(field: str) -> bool:
    return len(field) >= 2 and field[0] == field[-1] == '"' and '""' in field[1:-1]


def read_tsv(path: str | Path, *, strict: bool = True, src_lang: str = "en", tgt_lang: str = "vi") -> LoadedCorpus:
    """`src<TAB>tgt` per line. Strict: a line with another column count is an error naming it.

    Non-strict: such lines become rejects with reason `malformed_tsv`, so counts still reconcile.
    A first line naming the columns (`src tgt`, or the corpus languages, e.g. `de en`) is a header; one naming
    them the other way round (`en de` for de-en) is read by the names, as a Parquet file's columns are. A header of
    more columns (`id source target score`) that names one of each side says which two to read.
    """
    from mtcore.data.ledger import rejects_table

    path = Path(path)
    src, tgt, ids, bad, quoted = [], [], [], [], []
    picked: tuple[int, int] | None = None  # (src, tgt) columns that a header of more than two names
    header = False
    header_line, repeated = "", []  # the header's text; later lines repeating it (not pairs)
    for line_no, line in enumerate(_decode_lines(path), start=1):
        cols = line.split("\t")
        if line_no == 1:
            named = cols[:2] if len(cols) > 2 and not any(c.strip() for c in cols[2:]) else cols
            found = pair_columns(named, src_lang, tgt_lang) if len(set(named)) == len(named) else None
            roles = () if found is None else tuple("src" if c == found[0] else "tgt" if c == found[1] else None for c in named)
            if len(roles) > 2:  # `id source target score`
                picked = (roles.index("src"), roles.index("tgt"))
                others = [c for c, r in zip(cols, roles) if r is None]
                log.warning("%s:1: a header row; reading its columns %s and %s as src and tgt (not read: %s)", path,
                            cols[picked[0]], cols[picked[1]], ", ".join(others) or "-")
                width, header_line = len(cols), line.strip()
                continue
            if roles == ("src", "tgt"):
                log.warning("%s:1: a header row (%s), not a pair: skipped", path, ", ".join(cols))
                header = True
                header_line = line.strip()
                continue
            if roles == ("tgt", "src"):  # columns read by their names, as a Parquet file's are
                picked, width, header_line = (1, 0), len(cols), line.strip()
                log.warning("%s:1: a header row (%s): the target column first; reading %s as src and %s as tgt", path,
                            ", ".join(cols), cols[1], cols[0])
                continue
        if header_line and line.strip() == header_line:  # files joined with `cat`, each with its header
            repeated.append(line_no)
            continue
        if picked is not None and line.strip():  # the header's columns (trailing empty ones may be left out)
            if len(cols) <= max(picked) or (len(cols) > width and any(c.strip() for c in cols[width:])):
                if strict:
                    raise CorpusError(f"{path}:{line_no}: expected {width} tab-separated columns, as the header names, "
                                      f"found {len(cols)}")
                bad.append((line, line_no, len(cols)))
                continue
            cols = [cols[picked[0]], cols[picked[1]]]
        if len(cols) == 1 and not line.strip():  # a blank line is an empty pair (cleaning: `empty`), as in a Moses pair
            cols = ["", ""]
        if len(cols) > 2 and not any(c.strip() for c in cols[2:]):  # `src<TAB>tgt<TAB>`: trailing empty fields
            cols = cols[:2]
        if len(cols) != 2:
            if strict:
                cr = "; its lines end in a bare carriage return (\\r, old Mac line ends): convert them to \\n" if "\r" in line else ""
                more = (f" (more columns, such as a score or URLs? name them in a header line, e.g. src<TAB>tgt<TAB>score, "
                        f"or keep the pair's two: cut -f1,2 {path.name} > pairs.tsv)") if len(cols) > 2 and not cr else ""
                raise CorpusError(f"{path}:{line_no}: expected 2 tab-separated columns (src, tgt), found {len(cols)}{cr}{more}")
            bad.append((line, line_no, len(cols)))
            continue
        if any(_csv_quoted(c) for c in cols):
            quoted.append(line_no)
        src.append(cols[0])
        tgt.append(cols[1])
        ids.append(f"{path.name}:{line_no}")
    if columns_swapped(src, tgt, src_lang, tgt_lang):  # a TSV's column order is a convention nothing in it states
        how = "read by its header" if picked is not None or header else "read in the order src<TAB>tgt"
        raise CorpusError(f"{path}: its columns, {how} as {src_lang} and {tgt_lang}, read as {tgt_lang} and "
                          f"{src_lang}: a {tgt_lang}-{src_lang} file (--langs {tgt_lang}-{src_lang}; job.corpus_langs "
                          f"for train and tune)? or name its columns in a first line ({tgt_lang}<TAB>{src_lang}: they "
                          "are then read by name), or swap them")
    if repeated:
        log.warning("%s: the header row repeated at %d later line(s) (first at line %d; files joined with cat?): "
                    "skipped, not pairs", path, len(repeated), repeated[0])
    if quoted:  # kept as they are (a catalog string may be quoted), but a CSV writer's quoting is not text
        log.warning("%s: %d line(s) look CSV-quoted (a field in \"...\" with doubled \"\" inside; first at line %d): their "
                    "quotes are read as text; write TSV without quoting (pandas: quoting=csv.QUOTE_NONE)",
                    path, len(quoted), quoted[0])
    rejects = rejects_table(
        src=[b[0] for b in bad],
        tgt=[""] * len(bad),
        origin=[path.name] * len(bad),
        ids=[f"{path.name}:{b[1]}" for b in bad],
        stage="read",
        reason="malformed_tsv",
        details=[f"{b[2]} columns" for b in bad],
    )
    return LoadedCorpus(_table(src, tgt, path.name, ids), rejects)


def read_parallel_text(prefix: str | Path, src_lang: str = "en", tgt_lang: str = "vi") -> pa.Table:
    """`PREFIX.en` + `PREFIX.vi`, line-aligned (the Moses/IWSLT layout)."""
    prefix = Path(prefix)
    src_path, tgt_path = (_side_file(prefix, lang) for lang in (src_lang, tgt_lang))
    for p in (src_path, tgt_path):
        if not p.is_file():
            raise CorpusError(f"{p}: file not found (expected the pair {src_path.name} + {tgt_path.name})")
    src, tgt = _decode_lines(src_path), _decode_lines(tgt_path)
    for longer, shorter in ((src, tgt), (tgt, src)):  # one file's extra blank lines at its end are not lines of pairs
        while len(longer) > len(shorter) and not longer[-1].strip():
            longer.pop()
    if len(src) != len(tgt):
        raise CorpusError(
            f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: "
            f"line-aligned files must have the same number of lines"
        )
    ids = [f"{prefix.name}:{i}" for i in range(1, len(src) + 1)]
    return _table(src, tgt, prefix.name, ids)


def _side_file(prefix: Path, lang: str) -> Path:
    """PREFIX.LANG, or PREFIX.LANG.gz where only that exists; the suffix in any case (OPUS names files
    PREFIX.zh_CN, `--langs en-zh_CN` reads it as zh_cn; PREFIX.EN is PREFIX.en)."""
    plain = prefix.with_name(f"{prefix.name}.{lang}")
    packed = plain.with_name(plain.name + ".gz")
    if not plain.exists() and not packed.exists() and prefix.parent.is_dir():
        wanted = {plain.name.lower(): "plain", packed.name.lower(): "packed"}
        found = {wanted[p.name.lower()]: p for p in prefix.parent.iterdir() if p.name.lower() in wanted}
        plain, packed = found.get("plain", plain), found.get("packed", packed)
    return packed if packed.is_file() and not plain.is_file() else plain


def is_parallel_prefix(path: str | Path, src_lang: str = "en", tgt_lang: str = "vi") -> bool:
    return any(_side_file(Path(path), lang).exists() for lang in (src_lang, tgt_lang))


# --------------------------------------------------------------------------- Parquet


def _is_text_or_null(typ: pa.DataType) -> bool:
    return is_text_type(typ) or pa.types.is_null(typ)  # a column of nulls only is stored as type null


def parquet_schema(path: str | Path, src_lang: str = "en", tgt_lang: str = "vi") -> pa.Schema:
    """The schema of a Parquet file or directory, checked against the contract without reading rows."""
    path = Path(path)
    schema = parquet_files_schema(path)
    columns = pair_columns(schema.names, src_lang, tgt_lang)
    fields = schema
    if columns is None and (nested := struct_pair(schema, src_lang, tgt_lang)):
        column, *columns = nested
        fields = pa.schema([schema.field(column).type.field(name) for name in columns])
    if columns is None:
        missing = [c for c in ("src", "tgt") if c not in schema.names]
        raise CorpusError(f"{path}: missing column(s) {missing}; a parallel corpus needs 'src' and 'tgt' (or "
                          f"'source'/'target', '{src_lang}'/'{tgt_lang}', or a struct column of fields "
                          f"'{src_lang}' and '{tgt_lang}') (found {schema.names}){_ambiguous(schema.names, src_lang, tgt_lang)}")
    for name in columns:
        if not _is_text_or_null(fields.field(name).type):
            raise CorpusError(f"{path}: column '{name}' must be strings, found {fields.field(name).type}")
    return schema


def _ambiguous(names: list[str], src_lang: str, tgt_lang: str) -> str:
    """Why `pair_columns` found no pair where columns name a side: two of them name the same side."""
    by_role: dict[str, list[str]] = {}
    for name in names:
        if role := column_role(name, src_lang, tgt_lang):
            by_role.setdefault(role, []).append(name)
    twice = [f"{' and '.join(repr(n) for n in found)} each name the {role} side" for role, found in sorted(by_role.items())
             if len(found) > 1]
    return f"; {', '.join(twice)}: keep one column per side" if twice else ""


def struct_pair(schema: pa.Schema, src_lang: str = "en", tgt_lang: str = "vi") -> tuple[str, str, str] | None:
    """(column, source field, target field) of a struct column that holds the pair: Hugging Face's translation
    datasets store `translation: {en: …, vi: …}` (IWSLT'15 en-vi, OPUS-100, WMT)."""
    for f in schema:
        if pa.types.is_struct(f.type):
            found = pair_columns([f.type.field(i).name for i in range(f.type.num_fields)], src_lang, tgt_lang)
            if found:
                return f.name, *found
    return None


_SPLIT_NAMES = {"train": "train", "training": "train", "valid": "dev", "validation": "dev", "dev": "dev", "eval": "dev",
                "test": "test"}


def swap_sides(table: pa.Table) -> pa.Table:
    """The same pairs read the other way round: `src` and `tgt` exchanged, other columns as they are."""
    return table.rename_columns([{"src": "tgt", "tgt": "src"}.get(c, c) for c in table.column_names])


def parquet_parts(folder: Path) -> list[str]:
    """A folder's Parquet files, in name order, at any depth: `*.parquet`, not hidden or `_`-prefixed (Spark's
    _SUCCESS, .crc files), so that a README or a checksum file beside them (a downloaded dataset's folder) is no part.
    A folder whose files are of several splits (a Hugging Face dataset's train-…, validation-…, test-…) is refused:
    read whole, its test pairs would be training pairs."""
    parts = [p for p in sorted(folder.rglob("*.parquet")) if p.is_file()
             and not any(part.startswith((".", "_")) for part in p.relative_to(folder).parts)]
    splits: dict[str, Path] = {}
    for p in parts:
        words = re.split(r"[^a-z]+", str(p.relative_to(folder)).lower())
        for split in {_SPLIT_NAMES[w] for w in words if w in _SPLIT_NAMES}:
            splits.setdefault(split, p)
    if len(splits) > 1:
        found = ", ".join(f"{split}: {p.relative_to(folder)}" for split, p in splits.items())
        raise CorpusError(f"{folder}: holds the Parquet files of several splits ({found}); read whole, one split's "
                          f"pairs would be another's: pass the folder or file of the split you mean")
    return [str(p) for p in parts]


_TEXT_FORMATS = (".tsv", ".txt", ".tab", ".po", ".mo", ".tsv.gz", ".txt.gz", ".tab.gz")


def _folder_hint(folder: Path) -> str:
    """What to pass instead of a folder of text corpora: one of its files, or the prefix of a pair inside it."""
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    names = [n for n in names  # a readme or license beside the data is no corpus
             if not re.match(r"(readme|licen[cs]e|copying|changelog|changes|notes|authors|news)\b", n, re.I)]
    files = [n for n in names if n.lower().endswith(_TEXT_FORMATS)]
    prefixes = sorted({n.split(".")[0] for n in names if re.fullmatch(r"[^.]+\.[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,4})?(\.gz)?", n)
                       and n.split(".")[1].lower() not in {"md", "py", "sh", "po", "mo", "txt", "csv", "log", "ini", "cfg"}})
    if files:
        return f"; pass one of its files (e.g. {folder / files[0]})"
    if prefixes:
        return f"; for a line-aligned pair inside it, pass its prefix (e.g. {folder / prefixes[0]})"
    return ""


def parquet_files_schema(path: Path) -> pa.Schema:
    """The schema of a Parquet file or directory whose files all agree on it; any columns."""
    import pyarrow.dataset as pads

    if not path.exists():
        raise CorpusError(f"{path}: file not found")
    if path.is_dir() and not parquet_parts(path):
        raise CorpusError(f"{path}: directory holds no .parquet files{_folder_hint(path)}")
    try:
        dataset = pads.dataset(parquet_parts(path) if path.is_dir() else str(path), format="parquet")
        schema = dataset.schema
        if path.is_dir():  # every part has the first part's columns (any order, nullability or string layout)
            first, fields = _kinds(schema), {f.name: f for f in schema}
            for part in dataset.files[1:]:
                part_schema = pq.read_schema(part)
                kinds = _kinds(part_schema)
                if kinds.keys() != first.keys() or any(k != first[n] and "null" not in (k, first[n]) for n, k in kinds.items()):
                    diff = sorted(set(kinds.items()) ^ set(first.items()))
                    names = sorted({name for name, _ in diff})
                    raise CorpusError(
                        f"{part}: its columns differ from those of {dataset.files[0]} in {', '.join(names)} "
                        f"({'; '.join(_says(n, kinds) + ' here, ' + _says(n, first) + ' there' for n in names)}); "
                        f"every Parquet file of {path} must have the same columns")
                for f in part_schema:  # a column all None in one part is stored as type null (pandas, Spark)
                    if first[f.name] == "null" and kinds[f.name] != "null":
                        first[f.name], fields[f.name] = kinds[f.name], f
            schema = pa.schema([fields[name] for name in schema.names], metadata=schema.metadata)
    except (pa.ArrowInvalid, OSError) as err:
        raise CorpusError(f"{path}: not readable as Parquet: {err}") from None
    return schema


def _check_utf8(column: pa.ChunkedArray, path: Path, name: str) -> None:
    """Parquet strings are UTF-8 by contract, but a writer can store any bytes: say where, as the text readers do
    (a bad value failed deep inside a Ray worker)."""
    try:
        column.validate(full=True)
        return
    except pa.ArrowInvalid:
        pass
    for row, value in enumerate(column.cast(pa.binary()).to_pylist(), start=1):
        try:
            (value or b"").decode("utf-8")
        except UnicodeDecodeError as err:
            raise CorpusError(f"{path}: column '{name}', row {row}: invalid UTF-8 (byte {value[err.start]:#04x} at "
                              f"offset {err.start})") from None


def _kinds(schema: pa.Schema) -> dict[str, str]:
    """Column name -> type, strings of any layout as one kind: what parts of one corpus must agree on."""
    return {f.name: "string" if is_text_type(f.type) else str(f.type) for f in schema}


def _says(name: str, kinds: dict[str, str]) -> str:
    return f"{name}: {kinds[name]}" if name in kinds else f"no {name}"


def read_parquet_files(path: Path) -> pa.Table:
    """The rows of a Parquet file or directory (`parquet_files_schema`'s checks first), any columns. The parts of a
    folder are read one by one and put in the first part's column order and string layout."""
    schema = parquet_files_schema(path)

    try:
        parts = []
        for part in parquet_parts(path) if path.is_dir() else [str(path)]:
            table = pq.read_table(part).select(schema.names)
            for name in schema.names:
                if is_text_type(table.schema.field(name).type):
                    table = as_strings(table, name)
                    _check_utf8(table[name], Path(part), name)  # named by its part and row there
            parts.append(table)
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, OSError) as err:
        raise CorpusError(f"{path}: not readable as Parquet: {err}") from None


def is_text_type(typ: pa.DataType) -> bool:
    """Strings in any of Arrow's layouts (pandas' `category` is a dictionary of strings)."""
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    return pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ)


def as_strings(table: pa.Table, name: str) -> pa.Table:
    """Column `name` as plain strings (from a dictionary, a view, large strings)."""
    i = table.schema.get_field_index(name)
    return table if table.schema.field(i).type == pa.string() else table.set_column(i, name, pc.cast(table[name], pa.string()))


def has_contract_columns(path: str | Path) -> bool:
    """True when `origin` and `id` are stored, so that readers need not derive them."""
    return {"origin", "id"} <= set(parquet_schema(path).names)


def read_parquet(path: str | Path, src_lang: str = "en", tgt_lang: str = "vi") -> pa.Table:
    """A Parquet file or a directory of them; `origin`/`id` are filled in when absent (the one place
    they are derived for Parquet: origin = the file or folder name, id = `NAME:ROW`). Columns named as
    `pair_columns` says become src/tgt; pandas' saved index (`__index_level_0__`) is not a column of the corpus."""
    path = Path(path)
    schema = parquet_schema(path, src_lang, tgt_lang)
    table = read_parquet_files(path)
    columns = pair_columns(schema.names, src_lang, tgt_lang)
    if columns is None:  # the pair is a struct column's two fields
        column, *fields = struct_pair(schema, src_lang, tgt_lang)
        log.info("%s: fields %s of column '%s' read as src and tgt", path, " and ".join(fields), column)
        nested = table[column].combine_chunks()
        sides = dict(zip([nested.type.field(i).name for i in range(nested.type.num_fields)], nested.flatten()))
        table = table.drop_columns([n for n in (column, "src", "tgt") if n in table.column_names])
        for name, field in zip(("src", "tgt"), fields):
            table = table.append_column(name, sides[field])
            if is_text_type(table.schema.field(name).type):
                _check_utf8(as_strings(table, name)[name], path, name)
    elif columns != ("src", "tgt"):
        src, tgt = columns
        log.info("%s: columns '%s' and '%s' read as src and tgt", path, src, tgt)
        table = table.rename_columns(["src" if n == src else "tgt" if n == tgt else n for n in table.column_names])
    table = table.drop_columns([n for n in table.column_names if re.fullmatch(r"__index_level_\d+__", n)])
    for name in ("src", "tgt"):
        if pa.types.is_null(table.schema.field(name).type):
            table = table.set_column(table.schema.get_field_index(name), name, pa.nulls(len(table), pa.string()))
        table = as_strings(table, name)  # (UTF-8 is checked by read_parquet_files, part by part)
        if nulls := table[name].null_count:
            first = table[name].is_null().to_numpy(zero_copy_only=False).argmax() + 1
            log.warning("%s: %d null %s value(s) (first at row %d) read as empty text", path, nulls, name, first)
            table = table.set_column(table.schema.get_field_index(name), name, pc.fill_null(table[name], ""))
    sample = table.select(["src", "tgt"]).take(pa.array(range(0, len(table), max(1, len(table) // 2000)), pa.int64()))
    if columns_swapped(sample["src"].to_pylist(), sample["tgt"].to_pylist(), src_lang, tgt_lang):
        named = " and ".join(f"'{c}'" for c in (columns or fields))
        raise CorpusError(f"{path}: the columns read as src and tgt ({named}) hold {tgt_lang} and {src_lang} text: "
                          f"a {tgt_lang}-{src_lang} corpus (--langs {tgt_lang}-{src_lang}; job.corpus_langs for train "
                          f"and tune), or name its columns by language ('{src_lang}' and '{tgt_lang}': they are then "
                          "read by name)")
    return origin_and_id(table, path)


def origin_and_id(table: pa.Table, path: Path) -> pa.Table:
    """`origin` and `id` as the contract has them: derived where absent (origin = the file or folder name,
    id = `NAME:ROW`, ROW from 1 as the text readers number lines), strings, filled where null, unique."""
    names = pa.array([path.name] * len(table), pa.string())
    if "origin" not in table.column_names:
        table = table.append_column("origin", names)
    else:
        table = _user_column(table, "origin", path, names)
    if "id" not in table.column_names:
        return table.append_column("id", _row_ids(path, len(table)))
    table = _user_column(table, "id", path, None)
    if (dupes := len(table) - pc.count_distinct(table["id"]).as_py()) > 0:
        # ids key rejects, synthetic pairs and lineage to their rows: they must be unique
        log.warning("%s: column 'id' has %d repeated value(s): ids derived as %s:ROW instead", path, dupes, path.name)
        table = table.set_column(table.schema.get_field_index("id"), "id", _row_ids(path, len(table)))
    return table


def _row_ids(path: Path, n: int) -> pa.Array:
    return pa.array([f"{path.name}:{i}" for i in range(1, n + 1)], pa.string())


def _user_column(table: pa.Table, name: str, path: Path, fallback: pa.Array | None) -> pa.Table:
    """A stored `origin`/`id` column as strings (numbers are cast), its nulls filled from `fallback` (None: the
    row ids, made only when needed) with a warning."""
    i = table.schema.get_field_index(name)
    typ = table.schema.field(i).type
    if pa.types.is_null(typ):  # nothing stored: every value is filled in below
        table, typ = table.set_column(i, name, pa.nulls(len(table), pa.string())), pa.string()
    if not is_text_type(typ):
        if not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)):
            raise CorpusError(f"{path}: column '{name}' must be strings (or numbers), found {typ}")
        log.info("%s: column '%s' holds %s values: read as strings", path, name, typ)
    table = as_strings(table, name)
    if nulls := table[name].null_count:
        log.warning("%s: %d null '%s' value(s): filled in as %s", path, nulls, name, "the file name" if name == "origin" else "NAME:ROW")
        fallback = _row_ids(path, len(table)) if fallback is None else fallback
        table = table.set_column(i, name, pc.if_else(pc.is_null(table[name]), fallback, table[name]))
    return table


# --------------------------------------------------------------------------- dispatch


def load_corpus(path: str | Path, *, strict: bool = True, src_lang: str = "en", tgt_lang: str = "vi") -> LoadedCorpus:
    """Read any supported corpus format; the format is chosen by what `path` is."""
    path = Path(path)
    if path.is_dir() and (path / "kept").is_dir() and ((path / "report.json").is_file() or (path / "_stage.json").is_file()):
        log.warning("%s is a stage's output: reading its kept/ pairs (%s)", path, path / "kept")
        path = path / "kept"
    if path.is_dir():
        table = read_parquet(path, src_lang, tgt_lang)
        rejects = empty_rejects()
    elif path.is_file():
        suffix = path.suffix.lower()
        if suffix == ".gz":  # data.tsv.gz: the format is the suffix before .gz
            suffix = Path(path.stem).suffix.lower()
        if suffix == ".parquet":
            table, rejects = read_parquet(path, src_lang, tgt_lang), empty_rejects()
        elif suffix in (".po", ".mo", ".pot"):
            from mtcore.data.catalogs import catalog_table

            table, rejects = catalog_table(path, origin=path.name, line_ids=True), empty_rejects()
        elif suffix in (".tsv", ".txt", ".tab"):
            loaded = read_tsv(path, strict=strict, src_lang=src_lang, tgt_lang=tgt_lang)
            table, rejects = loaded.table, loaded.rejects
        elif suffix in (f".{src_lang}", f".{tgt_lang}"):
            prefix = path.with_suffix("") if path.suffix.lower() != ".gz" else Path(path.stem).with_suffix("")
            raise CorpusError(f"{path}: one side of a line-aligned pair; pass the prefix {path.parent / prefix.name} "
                              f"(it reads {prefix.name}.{src_lang} + {prefix.name}.{tgt_lang})")
        else:
            raise CorpusError(f"{path}: unknown corpus format '{suffix}' (expected .parquet, .tsv[.gz], .po, .mo "
                              f"or a PREFIX of PREFIX.{src_lang}/PREFIX.{tgt_lang}[.gz])")
    elif is_parallel_prefix(path, src_lang, tgt_lang):
        table, rejects = read_parallel_text(path, src_lang, tgt_lang), empty_rejects()
    else:
        raise not_found(path, src_lang, tgt_lang)
    if len(table) == 0 and len(rejects) == 0:
        raise CorpusError(f"{path}: corpus is empty")
    return LoadedCorpus(table, rejects)


_PACKED = (".xz", ".bz2", ".zst", ".zip", ".7z")  # what OPUS and others ship that is not read (.gz is)


def not_found(path: Path, src_lang: str = "en", tgt_lang: str = "vi") -> CorpusError:
    """The error for a corpus path that names nothing readable, with what was there instead."""
    pair = f"{path.name}.{src_lang} + {path.name}.{tgt_lang}"
    if path.exists() and not path.is_dir():  # a pipe (`<(zcat f.gz)`), a socket, a device
        return CorpusError(f"{path}: not a regular file (a pipe?); pipe TSV into standard input with --input - "
                           f"instead, or save it to a file")
    siblings = sorted(p.name for p in path.parent.iterdir()) if path.parent.is_dir() else []
    packed = [n for n in siblings if n.lower().startswith(f"{path.name.lower()}.") and n.lower().endswith(_PACKED)]
    if packed:
        return CorpusError(f"{path}: found {', '.join(packed)}, compressed in a format mtcore does not read (it reads "
                           f".gz): decompress them, or recompress with gzip")
    if path.absolute().is_relative_to(paths.DATA_DIR.absolute()) and not paths.DATA_DIR.is_dir():
        return CorpusError(f"{path}: the embedded data (data/) comes with a checkout of mtcore's repository, not with the "
                           "installed package; run from a checkout, or name your own corpus")
    return CorpusError(f"{path}: file not found (nor {pair})")


def check_exists(path: str | Path, src_lang: str = "en", tgt_lang: str = "vi") -> None:
    """A corpus path names a file, a folder of Parquet files (or a stage's output) or a Moses prefix of these
    languages; else `not_found`'s error, or the one the reader gives a folder of other files."""
    path = Path(path)
    if not (path.is_file() or path.is_dir() or is_parallel_prefix(path, src_lang, tgt_lang)):
        raise not_found(path, src_lang, tgt_lang)
    stage = path / "kept"
    if path.is_dir() and not parquet_parts(path) and not (stage.is_dir() and parquet_parts(stage)):
        raise CorpusError(f"{path}: directory holds no .parquet files{_folder_hint(path)}")


def spool_stdin(folder: Path, stream: BinaryIO | None = None) -> Path:
    """`--input -`: TSV from standard input, saved as FOLDER/SHA256-PREFIX.tsv.

    The stages read files (Ray Data splits them; a fingerprint hashes their contents), so the
    stream is saved first; named by its contents, the same input is the same file, and a rerun
    with it reuses the stage's output like a rerun on a named file does.
    """
    stream = stream if stream is not None else sys.stdin.buffer
    data = stream.read()
    if not data.strip():
        raise CorpusError("-: standard input is empty (expected src<TAB>tgt lines)")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}.tsv"
    if not path.is_file():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    name_path(path, "stdin")  # `stdin:2: invalid UTF-8`, not the copy's name
    return path


def corpus_argument(value: str, stdin_folder: Path) -> str:
    """A corpus option's value as a path: `-` (TSV on stdin) is saved under `stdin_folder` first."""
    return str(spool_stdin(stdin_folder)) if value == "-" else value


def read_corpus(path: str | Path, **kwargs) -> pa.Table:
    """Strict reading: the table, or an error naming the culprit."""
    return load_corpus(path, strict=True, **kwargs).table


def write_parquet(table: pa.Table, path: str | Path) -> Path:
    """zstd-compressed Parquet, parent folders created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")
    return path


def heldout_texts() -> set[str]:
    """Every sentence of the embedded held-out sets (dev, test, the outdated-translation dev set): the built-in
    encoder and pair classifier never train on them, so that what they score there is unseen."""
    texts: set[str] = set()
    for split in (paths.DEV, paths.TEST):
        if split.exists():
            t = read_corpus(split)
            texts |= set(t["src"].to_pylist()) | set(t["tgt"].to_pylist())
    if paths.OUTDATED_DEV.exists():
        t = pq.read_table(paths.OUTDATED_DEV, columns=["src", "tgt"])
        texts |= set(t["src"].to_pylist()) | set(t["tgt"].to_pylist())
    return texts
