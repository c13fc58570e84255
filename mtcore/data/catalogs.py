"""Readers for gettext catalogs (``.po`` text and ``.mo`` binary).

Free-software translations are the embedded English–Vietnamese corpus (see
data/SOURCES.md), so the readers turn a catalog into
(English msgid, Vietnamese msgstr) pairs, keeping message contexts and plural
forms and dropping what carries no translation (the header, untranslated and,
by default, fuzzy entries). Nothing else is cleaned here: format strings,
accelerators and multi-line help text stay as the translators wrote them.

Bad input raises :class:`CatalogError` (or :class:`FileNotFoundError`) with a
message naming the file, and for ``.po`` the line.
"""

from __future__ import annotations

import codecs
import hashlib
import logging
import re
import struct
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa

from mtcore.data.files import read_bytes
from mtcore.errors import MtcoreError

log = logging.getLogger(__name__)

MO_MAGIC_LE = 0x950412DE  # GNU gettext magic, as read little-endian
MO_MAGIC_BE = 0xDE120495  # the same magic written by a big-endian machine
CONTEXT_SEP = "\x04"  # .mo stores a msgctxt as "context\x04msgid"
PLURAL_SEP = "\x00"  # .mo stores plural forms NUL-separated
DEFAULT_CHARSET = "utf-8"  # catalogs without a usable charset are read as UTF-8

TABLE_SCHEMA = pa.schema(
    [
        ("src", pa.string()),
        ("tgt", pa.string()),
        ("origin", pa.string()),
        ("id", pa.string()),
        ("context", pa.string()),
    ]
)


class CatalogError(MtcoreError, ValueError):
    """A catalog that cannot be read; the message names the file (and line)."""


@dataclass(frozen=True)
class CatalogEntry:
    """One translated message: English ``msgid`` and its Vietnamese ``msgstr``.

    ``plural_index`` is 0 for a singular message and 1 for the ``msgid_plural``
    form, so that both English forms become pairs. ``line`` is the 1-based
    line of the ``msgid`` keyword in a ``.po`` file (0 for ``.mo``). A fuzzy
    entry (read only on request) has ``fuzzy`` set and, where msgmerge kept it
    (``#| msgid``), the ``previous`` English that its translation was made for.
    """

    msgid: str
    msgstr: str
    context: str = ""
    plural_index: int = 0
    line: int = 0
    fuzzy: bool = False
    previous: str | None = None


# ---------------------------------------------------------------------------
# shared helpers


def _require_file(path: Path) -> None:
    """Fail early with the path in the message rather than deep in parsing."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: catalog file not found")


def charset_from_header(header: str) -> str:
    """The codec named by a catalog header's ``Content-Type`` (UTF-8 if none).

    Templates carry the placeholder ``charset=CHARSET``; gettext treats that
    as ASCII-compatible, so it falls back to UTF-8 here.
    """
    match = re.search(r"charset=\s*([-\w.:]+)", header, flags=re.IGNORECASE)
    if not match or match.group(1).upper() == "CHARSET":
        return DEFAULT_CHARSET
    try:
        return codecs.lookup(match.group(1)).name
    except LookupError:
        raise CatalogError(f"unknown charset {match.group(1)!r} in catalog header") from None


def _plural_entries(
    msgid: str, msgid_plural: str | None, forms: list[str], context: str, line: int
) -> list[CatalogEntry]:
    """Turn one catalog message into pairs, one per English form.

    The singular maps to ``msgstr[0]``; the plural to ``msgstr[1]`` when the
    language has it, else ``msgstr[0]`` (Vietnamese has ``nplurals=1``).
    Empty translations are untranslated and dropped.
    """
    entries = []
    if forms and forms[0]:
        entries.append(CatalogEntry(msgid, forms[0], context, 0, line))
    if msgid_plural is not None:
        plural_str = forms[1] if len(forms) > 1 else (forms[0] if forms else "")
        if plural_str:
            entries.append(CatalogEntry(msgid_plural, plural_str, context, 1, line))
    return entries


# ---------------------------------------------------------------------------
# .mo


def _mo_header(data: bytes, path: Path) -> tuple[str, int, int, int]:
    """Check the magic and return (struct byte order, count, msgid table, msgstr table)."""
    if len(data) < 4:
        raise CatalogError(f"{path}: not a .mo file (only {len(data)} bytes)")
    (magic,) = struct.unpack("<I", data[:4])
    if magic == MO_MAGIC_LE:
        order = "<"
    elif magic == MO_MAGIC_BE:
        order = ">"
    else:
        raise CatalogError(f"{path}: not a .mo file (bad magic 0x{magic:08x})")
    if len(data) < 20:
        raise CatalogError(f"{path}: truncated .mo file (header is {len(data)} of 20 bytes)")
    revision, count, ids_at, strs_at = struct.unpack(order + "4I", data[4:20])
    if revision >> 16 not in (0, 1):
        raise CatalogError(f"{path}: unsupported .mo revision {revision >> 16}")
    return order, count, ids_at, strs_at


def _mo_string(data: bytes, order: str, table: int, index: int, path: Path) -> bytes:
    """Read the ``index``-th (length, offset) descriptor's bytes, checking bounds.

    Bounds are checked so that a cut-off file gives an error naming it
    instead of silently short strings.
    """
    at = table + 8 * index
    if at + 8 > len(data):
        raise CatalogError(f"{path}: truncated .mo file (string table ends at byte {len(data)})")
    length, offset = struct.unpack(order + "2I", data[at : at + 8])
    if offset + length > len(data):
        raise CatalogError(
            f"{path}: truncated .mo file (string {index} needs bytes up to {offset + length}, "
            f"file has {len(data)})"
        )
    return data[offset : offset + length]


def _mo_raw_pairs(path: Path) -> list[tuple[bytes, bytes]]:
    """All (msgid bytes, msgstr bytes) in a .mo, header included."""
    data = _catalog_bytes(path)
    order, count, ids_at, strs_at = _mo_header(data, path)
    return [
        (
            _mo_string(data, order, ids_at, i, path),
            _mo_string(data, order, strs_at, i, path),
        )
        for i in range(count)
    ]


def _decode(raw: bytes, charset: str, path: Path, where: str) -> str:
    """Decode with the catalog's charset; invalid bytes name the file and place."""
    try:
        return raw.decode(charset)
    except UnicodeDecodeError as err:
        raise CatalogError(
            f"{path}: invalid {charset} in {where} at byte {err.start}: {raw[err.start:err.start + 4]!r}"
        ) from None


def read_mo(path: str | Path) -> list[CatalogEntry]:
    """Read a compiled catalog into translated entries (header skipped).

    Parsed directly from the binary layout (GNU gettext manual, "The Format of
    GNU MO Files") so that contexts and plural forms survive; the standard
    library's ``GNUTranslations`` folds them into a lookup dictionary.
    """
    path = Path(path)
    _require_file(path)
    raw_pairs = _mo_raw_pairs(path)
    header = next((s for k, s in raw_pairs if k == b""), b"")
    try:
        charset = charset_from_header(header.decode("ascii", errors="replace"))
    except CatalogError as err:
        raise CatalogError(f"{path}: {err}") from None
    entries: list[CatalogEntry] = []
    for index, (raw_id, raw_str) in enumerate(raw_pairs):
        if raw_id == b"":
            continue
        key = _decode(raw_id, charset, path, f"msgid of message {index}")
        value = _decode(raw_str, charset, path, f"msgstr of message {index}")
        context, _, key = key.rpartition(CONTEXT_SEP)
        msgid, sep, msgid_plural = key.partition(PLURAL_SEP)
        forms = value.split(PLURAL_SEP)
        entries.extend(_plural_entries(msgid, msgid_plural if sep else None, forms, context, 0))
    return entries


# ---------------------------------------------------------------------------
# .po

_PO_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "r": "\r", "a": "\a",
               "b": "\b", "f": "\f", "v": "\v"}  # fmt: skip
_PO_KEYWORD = re.compile(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)\s+(".*)$')


def _po_unquote(token: str, path: Path, line: int) -> str:
    """Decode one ``"..."`` literal with C escapes (and octal ``\\NNN``)."""
    token = token.strip()
    if len(token) < 2 or token[0] != '"' or token[-1] != '"':
        raise CatalogError(f"{path}:{line}: expected a quoted string, got {token!r}")
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        char = body[i]
        if char == '"':
            raise CatalogError(f"{path}:{line}: unescaped quote inside string")
        if char != "\\":
            out.append(char)
            i += 1
            continue
        if i + 1 >= len(body):
            raise CatalogError(f"{path}:{line}: string ends with a lone backslash")
        code = body[i + 1]
        octal = re.match(r"[0-7]{1,3}", body[i + 1 :])
        if code in _PO_ESCAPES:
            out.append(_PO_ESCAPES[code])
            i += 2
        elif octal:
            out.append(chr(int(octal.group(0), 8)))
            i += 1 + len(octal.group(0))
        elif code == "x" and (hexa := re.match(r"[0-9a-fA-F]{1,2}", body[i + 2 :])):  # \xHH, as msgfmt reads it
            out.append(chr(int(hexa.group(0), 16)))
            i += 2 + len(hexa.group(0))
        else:
            raise CatalogError(f"{path}:{line}: unknown escape \\{code}")
    return "".join(out)


@dataclass
class _PoMessage:
    """A .po entry being assembled line by line."""

    line: int = 0
    fuzzy: bool = False
    previous: str | None = None  # `#| msgid`: the English a fuzzy translation was made for
    context: str | None = None
    msgid: str | None = None
    msgid_plural: str | None = None
    forms: dict[int, str] | None = None
    last: str | None = None  # the field a continuation string appends to

    def append(self, text: str) -> None:
        """Add a continuation line's text to the field seen last."""
        if self.last == "msgctxt":
            self.context = (self.context or "") + text
        elif self.last == "msgid":
            self.msgid = (self.msgid or "") + text
        elif self.last == "msgid_plural":
            self.msgid_plural = (self.msgid_plural or "") + text
        else:
            index = int(self.last.split("[")[1].rstrip("]")) if "[" in self.last else 0
            self.forms[index] += text


def _po_decode(path: Path) -> list[str]:
    """Read a .po file with the charset its header declares, as lines."""
    data = _catalog_bytes(path)
    match = re.search(rb'"Content-Type:[^"]*charset=\s*([-\w.:]+)', data)
    try:
        charset = charset_from_header("charset=" + match.group(1).decode("ascii")) if match else DEFAULT_CHARSET
    except CatalogError as err:
        raise CatalogError(f"{path}: {err}") from None
    try:
        text = data.decode(charset)
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise CatalogError(f"{path}:{line}: invalid {charset} ({data[err.start:err.start + 4]!r})") from None
    # Lines end at \n (\r\n, \r): not at U+2028, U+0085 or a form feed, which `str.splitlines` also splits
    # at and msgfmt reads as text inside a comment or string.
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").removesuffix("\n").split("\n")


def _catalog_bytes(path: Path) -> bytes:
    return read_bytes(path, CatalogError)  # gzip'd catalogs (po.gz) as the text readers take them


def _po_finish(msg: _PoMessage, path: Path, include_fuzzy: bool, skipped: Counter) -> list[CatalogEntry]:
    """Validate a complete .po message and turn it into entries."""
    if msg.msgid is None:
        if msg.context is not None or msg.forms is not None:
            raise CatalogError(f"{path}:{msg.line}: entry without msgid")
        return []  # only comments
    if msg.forms is None:
        raise CatalogError(f"{path}:{msg.line}: msgid without msgstr")
    if msg.msgid == "" and msg.context is None:
        return []  # the header
    if msg.fuzzy and not include_fuzzy:
        skipped["fuzzy"] += 1
        return []
    if sorted(msg.forms) != list(range(len(msg.forms))):  # as msgfmt: msgstr[1] alone is not the singular's
        have = ", ".join(f"msgstr[{i}]" for i in sorted(msg.forms))
        raise CatalogError(f"{path}:{msg.line}: plural forms {have}; they must be msgstr[0] to msgstr[{len(msg.forms) - 1}]")
    forms = [msg.forms[i] for i in sorted(msg.forms)]
    entries = _plural_entries(msg.msgid, msg.msgid_plural, forms, msg.context or "", msg.line)
    if msg.fuzzy:
        entries = [replace(e, fuzzy=True, previous=msg.previous if e.plural_index == 0 else None) for e in entries]
    if not entries:
        skipped["untranslated"] += 1
    return entries


def _po_keyword(msg: _PoMessage, keyword: str, index: str | None, value: str, path: Path, line: int) -> None:
    """Store one keyword line's value in ``msg``, checking the keyword order."""
    if keyword == "msgctxt":
        msg.context, msg.line = value, line
    elif keyword == "msgid":
        msg.msgid, msg.line = value, line
    elif msg.msgid is None:
        raise CatalogError(f"{path}:{line}: {keyword} before msgid")
    elif keyword == "msgid_plural":
        if msg.forms is not None:
            raise CatalogError(f"{path}:{line}: msgid_plural after msgstr")
        msg.msgid_plural = value
    else:
        msg.forms = msg.forms or {}
        if int(index or 0) in msg.forms:
            raise CatalogError(f"{path}:{line}: {keyword} repeated in one entry")
        msg.forms[int(index or 0)] = value


def read_po(path: str | Path, include_fuzzy: bool = False, skipped: Counter | None = None) -> list[CatalogEntry]:
    """Read a .po catalog into translated entries.

    A hand-written line parser (keywords, ``"..."`` continuations, comments)
    so that errors can name the line; fuzzy entries are guesses by msgmerge,
    not translations, so they are dropped unless ``include_fuzzy``. Obsolete
    ``#~`` entries are dropped always (counted in `skipped`, as fuzzy and untranslated ones).
    """
    path = Path(path)
    _require_file(path)
    skipped = Counter() if skipped is None else skipped  # messages that are no translation: fuzzy, untranslated
    entries: list[CatalogEntry] = []
    msg = _PoMessage()
    previous_open = False  # a `#| "..."` line continues the previous msgid
    for number, raw in enumerate(_po_decode(path), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if msg.forms is not None:  # a comment after msgstr starts the next entry
                entries += _po_finish(msg, path, include_fuzzy, skipped)
                msg = _PoMessage()
            if line.startswith("#,") and "fuzzy" in (f.strip() for f in line[2:].split(",")):
                msg.fuzzy = True
            elif line.startswith("#| msgid "):
                msg.previous, previous_open = _po_unquote(line[len("#| msgid "):].strip(), path, number), True
            elif line.startswith('#| "') and previous_open:
                msg.previous += _po_unquote(line[2:].strip(), path, number)
            elif line.startswith("#|"):  # the previous msgctxt / msgid_plural: not kept
                previous_open = False
            elif line.startswith("#~ msgid "):  # an obsolete message: counted in the warning, as the others
                skipped["obsolete"] += 1
            continue
        if line.startswith('"'):
            if msg.last is None:
                raise CatalogError(f"{path}:{number}: string without a keyword")
            msg.append(_po_unquote(line, path, number))
            continue
        match = _PO_KEYWORD.match(line)
        if not match:
            raise CatalogError(f"{path}:{number}: syntax error: {line[:40]!r}")
        keyword = match.group(1).split("[")[0]
        if keyword in ("msgctxt", "msgid") and msg.forms is not None:
            entries += _po_finish(msg, path, include_fuzzy, skipped)
            msg = _PoMessage()
        if keyword == "msgid" and msg.msgid is not None:
            raise CatalogError(f"{path}:{number}: msgid without msgstr before it")
        value = _po_unquote(match.group(3), path, number)
        _po_keyword(msg, keyword, match.group(2), value, path, number)
        msg.last = match.group(1)
    entries += _po_finish(msg, path, include_fuzzy, skipped)
    seen: set[tuple[str, str, int]] = set()
    for e in entries:  # msgfmt refuses a catalog that defines a message twice: which translation is meant?
        key = (e.context, e.msgid, e.plural_index)
        if key in seen:
            where = f" (msgctxt {e.context!r})" if e.context else ""
            raise CatalogError(f"{path}: duplicate message definition: msgid {e.msgid[:60]!r}{where}")
        seen.add(key)
    return entries


# ---------------------------------------------------------------------------
# tables


def read_catalog(path: str | Path, include_fuzzy: bool = False, skipped: Counter | None = None) -> list[CatalogEntry]:
    """Read a ``.mo`` or ``.po`` file, chosen by its suffix."""
    path = Path(path)
    suffix = (Path(path.stem).suffix if path.suffix.lower() == ".gz" else path.suffix).lower()  # x.po.gz is a .po
    if suffix == ".mo":
        return read_mo(path)
    if suffix in (".po", ".pot"):
        return read_po(path, include_fuzzy=include_fuzzy, skipped=skipped)
    raise CatalogError(f"{path}: not a gettext catalog (expected .po or .mo)")


def entry_id(origin: str, entry: CatalogEntry) -> str:
    """A stable id: same catalog + message + form gives the same id on every build."""
    key = "\x1f".join([origin, entry.context, entry.msgid, str(entry.plural_index)])
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]


def line_id(origin: str, entry: CatalogEntry) -> str:
    """`NAME:LINE` of the msgid in a .po file, as the text readers number pairs (a plural form: `NAME:LINE/N`);
    the stable hash for a .mo, which has no lines."""
    if not entry.line:
        return entry_id(origin, entry)
    return f"{origin}:{entry.line}" + (f"/{entry.plural_index}" if entry.plural_index else "")


def entries_table(entries: list[CatalogEntry], origin: str, *, line_ids: bool = False) -> pa.Table:
    """Entries as a parallel-corpus table (README.md, "Data contract"); ids by `entry_id`, or `line_id` (a user's
    catalog: a reject names the line to look at)."""
    ids = line_id if line_ids else entry_id
    return pa.table(
        {
            "src": [e.msgid for e in entries],
            "tgt": [e.msgstr for e in entries],
            "origin": [origin] * len(entries),
            "id": [ids(origin, e) for e in entries],
            "context": [e.context for e in entries],
        },
        schema=TABLE_SCHEMA,
    )


def catalog_table(path: str | Path, origin: str, include_fuzzy: bool = False, *, line_ids: bool = False) -> pa.Table:
    """Read a catalog into a ``src, tgt, origin, id, context`` table; the messages that are not
    translations (fuzzy, untranslated) are counted in a warning. `line_ids`: see `entries_table`."""
    skipped: Counter = Counter()
    table = entries_table(read_catalog(path, include_fuzzy=include_fuzzy, skipped=skipped), origin, line_ids=line_ids)
    if skipped:
        log.warning("%s: %d pairs read; skipped %s (not translations)", path, len(table),
                    ", ".join(f"{n} {why}" for why, n in sorted(skipped.items())))
    return table
