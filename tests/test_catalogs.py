"""gettext catalog readers: .po text and .mo binary, and their errors."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from mtcore.data.catalogs import CatalogEntry, CatalogError, catalog_table, entry_id, read_mo, read_po

HEADER = (
    'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset={charset}\\n"\n'
    '"Plural-Forms: nplurals=1; plural=0;\\n"\n\n'
)


def po_text(body: str, charset: str = "UTF-8") -> str:
    return HEADER.format(charset=charset) + body


def mo_bytes(messages: dict[bytes, bytes], byteorder: str = "<") -> bytes:
    """A .mo file as msgfmt writes it (GNU gettext manual, "The Format of GNU MO Files")."""
    keys = sorted(messages)
    header_size, n = 28, len(keys)
    ids_at, strs_at = header_size, header_size + 8 * n
    data_at = strs_at + 8 * n
    table_ids, table_strs, blob = b"", b"", b""
    for key in keys:
        table_ids += struct.pack(byteorder + "2I", len(key), data_at + len(blob))
        blob += key + b"\0"
    for key in keys:
        table_strs += struct.pack(byteorder + "2I", len(messages[key]), data_at + len(blob))
        blob += messages[key] + b"\0"
    head = struct.pack(byteorder + "7I", 0x950412DE, 0, n, ids_at, strs_at, 0, 0)
    return head + table_ids + table_strs + blob


MO_HEADER = b"Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=1; plural=0;\n"


def pairs(entries: list[CatalogEntry]) -> list[tuple]:
    return sorted((e.msgid, e.msgstr, e.context, e.plural_index) for e in entries)


# --- .po ---------------------------------------------------------------------

PO_CASES = [
    ("simple", 'msgid "Open"\nmsgstr "Mở"\n', {}, [("Open", "Mở", "", 0)]),
    ("accelerator kept raw", 'msgid "_File"\nmsgstr "_Tập tin"\n', {}, [("_File", "_Tập tin", "", 0)]),
    ("context", 'msgctxt "menu"\nmsgid "Open"\nmsgstr "Mở"\n', {}, [("Open", "Mở", "menu", 0)]),
    (
        "plural, Vietnamese nplurals=1",
        'msgid "%d file"\nmsgid_plural "%d files"\nmsgstr[0] "%d tập tin"\n',
        {},
        [("%d file", "%d tập tin", "", 0), ("%d files", "%d tập tin", "", 1)],
    ),
    (
        "plural with two forms",
        'msgid "one day"\nmsgid_plural "%d days"\nmsgstr[0] "một ngày"\nmsgstr[1] "%d ngày"\n',
        {},
        [("%d days", "%d ngày", "", 1), ("one day", "một ngày", "", 0)],
    ),
    (
        "multi-line strings",
        'msgid ""\n"Line one\\n"\n"line two"\nmsgstr ""\n"Dòng một\\n"\n"dòng hai"\n',
        {},
        [("Line one\nline two", "Dòng một\ndòng hai", "", 0)],
    ),
    (
        "escapes",
        'msgid "a\\tb \\"q\\" c\\\\d"\nmsgstr "x\\ty \\"t\\" z\\\\w"\n',
        {},
        [('a\tb "q" c\\d', 'x\ty "t" z\\w', "", 0)],
    ),
    ("fuzzy dropped", '#, fuzzy, c-format\nmsgid "Save"\nmsgstr "Lưu"\n', {}, []),
    (
        "fuzzy kept on request",
        '#, fuzzy\nmsgid "Save"\nmsgstr "Lưu"\n',
        {"include_fuzzy": True},
        [("Save", "Lưu", "", 0)],
    ),
    ("untranslated dropped", 'msgid "Quit"\nmsgstr ""\n', {}, []),
    ("obsolete dropped", '#~ msgid "Old"\n#~ msgstr "Cũ"\n', {}, []),
    (
        "comments between entries",
        '# translator\n#: a.c:1\nmsgid "A b"\nmsgstr "X y"\n\n#. note\nmsgid "C d"\nmsgstr "Z w"\n',
        {},
        [("A b", "X y", "", 0), ("C d", "Z w", "", 0)],
    ),
]


@pytest.mark.parametrize("name, body, kwargs, expected", PO_CASES, ids=[c[0] for c in PO_CASES])
def test_read_po(tmp_path, name, body, kwargs, expected):
    path = tmp_path / "vi.po"
    path.write_text(po_text(body), encoding="utf-8")
    assert pairs(read_po(path, **kwargs)) == sorted(expected)


def test_read_po_header_skipped_and_lines(tmp_path):
    path = tmp_path / "vi.po"
    path.write_text(po_text('msgid "Open"\nmsgstr "Mở"\n'), encoding="utf-8")
    (entry,) = read_po(path)
    assert entry == CatalogEntry("Open", "Mở", "", 0, line=6)


def test_read_po_respects_header_charset(tmp_path):
    path = tmp_path / "vi.po"
    path.write_bytes(po_text('msgid "Café"\nmsgstr "Quán"\n', charset="ISO-8859-1").encode("latin-1"))
    assert pairs(read_po(path)) == [("Café", "Quán", "", 0)]


# --- .mo ---------------------------------------------------------------------

MO_CASES = [
    ("simple", {b"Open": "Mở".encode()}, [("Open", "Mở", "", 0)]),
    ("context", {b"menu\x04Open": "Mở".encode()}, [("Open", "Mở", "menu", 0)]),
    (
        "plural, one form",
        {b"%d file\x00%d files": "%d tập tin".encode()},
        [("%d file", "%d tập tin", "", 0), ("%d files", "%d tập tin", "", 1)],
    ),
    (
        "plural, two forms, with context",
        {b"ctx\x04one day\x00%d days": "một ngày\x00%d ngày".encode()},
        [("%d days", "%d ngày", "ctx", 1), ("one day", "một ngày", "ctx", 0)],
    ),
    ("multi-line", {b"a\nb": "x\ny".encode()}, [("a\nb", "x\ny", "", 0)]),
    ("untranslated dropped", {b"Quit": b""}, []),
]


@pytest.mark.parametrize("name, messages, expected", MO_CASES, ids=[c[0] for c in MO_CASES])
@pytest.mark.parametrize("byteorder", ["<", ">"], ids=["little-endian", "big-endian"])
def test_read_mo(tmp_path, name, messages, expected, byteorder):
    path = tmp_path / "vi.mo"
    path.write_bytes(mo_bytes({b"": MO_HEADER, **messages}, byteorder))
    assert pairs(read_mo(path)) == sorted(expected)


def test_read_mo_respects_header_charset(tmp_path):
    path = tmp_path / "vi.mo"
    header = b"Content-Type: text/plain; charset=ISO-8859-1\n"
    path.write_bytes(mo_bytes({b"": header, "Café".encode("latin-1"): b"Qu\xe1n"}))
    assert pairs(read_mo(path)) == [("Café", "Quán", "", 0)]


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="needs GNU msgfmt")
def test_mo_from_msgfmt_matches_po(tmp_path):
    """Parity with the reference tool: msgfmt's .mo reads back as the .po does."""
    body = "".join(body for _, body, kwargs, _ in PO_CASES if not kwargs)
    po = tmp_path / "vi.po"
    po.write_text(po_text(body), encoding="utf-8")
    mo = tmp_path / "vi.mo"
    subprocess.run(["msgfmt", "-o", str(mo), str(po)], check=True)
    assert pairs(read_mo(mo)) == pairs(read_po(po))


# --- errors ------------------------------------------------------------------

GOOD_MO = mo_bytes({b"": MO_HEADER, b"Open": "Mở".encode()})
BAD_UTF8_MO = mo_bytes({b"": MO_HEADER, b"Open": b"M\xff"})
ERROR_CASES = [
    # (name, file, content, message pattern); every message starts with the file (and line)
    ("bad magic", "vi.mo", b"\x00\x01\x02\x03" + GOOD_MO[4:], r"vi\.mo: not a \.mo file \(bad magic"),
    ("empty mo", "vi.mo", b"", r"vi\.mo: not a \.mo file"),
    ("truncated header", "vi.mo", GOOD_MO[:12], r"vi\.mo: truncated \.mo file"),
    ("truncated strings", "vi.mo", GOOD_MO[:-6], r"vi\.mo: truncated \.mo file"),
    ("mo invalid UTF-8", "vi.mo", BAD_UTF8_MO, r"vi\.mo: invalid utf-8 in msgstr"),
    ("po invalid UTF-8", "vi.po", po_text('msgid "A"\nmsgstr "M').encode() + b'\xff"\n', r"vi\.po:7: invalid utf-8"),
    ("po unknown keyword", "vi.po", po_text('msgid "A"\nmsgstring "B"\n').encode(), r"vi\.po:7: syntax error"),
    ("po unterminated string", "vi.po", po_text('msgid "A\nmsgstr "B"\n').encode(), r"vi\.po:6: expected a quoted"),
    ("po msgstr before msgid", "vi.po", b'# c\nmsgstr "B"\n', r"vi\.po:2: msgstr before msgid"),
    ("po msgstr repeated", "vi.po", po_text('msgstr "B"\n').encode(), r"vi\.po:6: msgstr repeated"),
    ("po msgid, no msgstr", "vi.po", po_text('msgid "A"\n\nmsgid "B"\nmsgstr ""\n').encode(), r"vi\.po:8: msgid without"),
    ("po dangling string", "vi.po", b'"orphan"\n', r"vi\.po:1: string without a keyword"),
    ("po bad escape", "vi.po", po_text('msgid "A\\q"\nmsgstr "B"\n').encode(), r"vi\.po:6: unknown escape"),
    ("po ends without msgstr", "vi.po", po_text('msgid "A"\n').encode(), r"vi\.po:6: msgid without msgstr"),
    # msgfmt refuses these too ("first plural form has nonzero index"): reading msgstr[1] as the singular was wrong
    ("po plural form alone", "vi.po", po_text('msgid "a file"\nmsgid_plural "%d files"\nmsgstr[1] "%d tệp"\n').encode(),
     r"vi\.po:6: plural forms msgstr\[1\]; they must be msgstr\[0\] to msgstr\[0\]"),
    ("po plural forms with a gap", "vi.po",
     po_text('msgid "a file"\nmsgid_plural "%d files"\nmsgstr[0] "tệp"\nmsgstr[2] "%d tệp"\n').encode(),
     r"vi\.po:6: plural forms msgstr\[0\], msgstr\[2\]; they must be msgstr\[0\] to msgstr\[1\]"),
]


@pytest.mark.parametrize("name, filename, content, message", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_bad_input_names_file_and_line(tmp_path, name, filename, content, message):
    path = tmp_path / filename
    path.write_bytes(content)
    reader = read_mo if filename.endswith(".mo") else read_po
    with pytest.raises(CatalogError, match=message):
        reader(path)


@pytest.mark.parametrize("reader", [read_mo, read_po])
def test_missing_file_names_it(tmp_path, reader):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        reader(tmp_path / "nowhere.mo")


# --- tables ------------------------------------------------------------------


def test_catalog_table_columns_and_stable_ids(tmp_path):
    path = tmp_path / "vi.mo"
    path.write_bytes(mo_bytes({b"": MO_HEADER, b"Open": "Mở".encode(), b"menu\x04Open": "Mở".encode()}))
    table = catalog_table(path, "pkg/app")
    assert table.column_names == ["src", "tgt", "origin", "id", "context"]
    assert sorted(table["context"].to_pylist()) == ["", "menu"]
    assert set(table["origin"].to_pylist()) == {"pkg/app"}
    assert len(set(table["id"].to_pylist())) == 2  # the context tells the two apart
    assert catalog_table(path, "pkg/app")["id"].to_pylist() == table["id"].to_pylist()
    assert entry_id("other/app", CatalogEntry("Open", "Mở")) != entry_id("pkg/app", CatalogEntry("Open", "Mở"))


def test_messages_that_are_no_translation_are_counted_not_dropped_silently(tmp_path, caplog):
    path = tmp_path / "vi.po"
    path.write_text(po_text('msgid "Open"\nmsgstr "Mở"\n\n#, fuzzy\nmsgid "Save"\nmsgstr "Lưu"\n\n'
                            '#, fuzzy\nmsgid "Save as"\nmsgstr "Lưu thành"\n\nmsgid "Quit"\nmsgstr ""\n'), encoding="utf-8")
    with caplog.at_level("WARNING", logger="mtcore.data.catalogs"):
        table = catalog_table(path, "app")
    assert table["src"].to_pylist() == ["Open"]
    assert "vi.po: 1 pairs read; skipped 2 fuzzy, 1 untranslated" in caplog.text


def test_po_lines_end_only_at_newlines_and_hex_escapes_are_read(tmp_path):
    """msgfmt reads U+2028 inside a comment or string as text, and \\xHH as a character; so does the reader."""
    from mtcore.data.catalogs import read_po

    po = tmp_path / "sep.po"
    po.write_text('msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n# note\u2028(see bug 12)\n'
                  'msgid "Line\u2028two"\nmsgstr "D\\x41ng"\n\nmsgid "Quit"\nmsgstr "Thoát"\n', encoding="utf-8")
    entries = read_po(po)
    assert [(e.msgid, e.msgstr) for e in entries] == [("Line\u2028two", "DAng"), ("Quit", "Thoát")]


def test_a_message_defined_twice_is_refused_as_msgfmt_refuses_it(tmp_path):
    from mtcore.data.catalogs import CatalogError, read_po

    po = tmp_path / "dup.po"
    po.write_text('msgid "Open"\nmsgstr "Mở"\n\nmsgctxt "menu"\nmsgid "Open"\nmsgstr "Mở ra"\n\nmsgid "Open"\nmsgstr "Mở tệp"\n',
                  encoding="utf-8")
    with pytest.raises(CatalogError, match="dup.po: duplicate message definition: msgid 'Open'"):
        read_po(po)
