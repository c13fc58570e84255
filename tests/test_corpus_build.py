"""The pure parts of the corpus builder: sentences, normalisation, junk, splits, markup."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mtcore.data.corpus_build import (
    BuildConfig,
    choose_splits,
    clean_heldout,
    dedupe_pairs,
    html_paragraphs,
    is_junk,
    looks_vietnamese,
    man_paragraphs,
    normalise_source,
    origin_package,
    read_package_list,
    split_sentences,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Mở tệp. Lưu tệp.", ["Mở tệp.", "Lưu tệp."]),
        ("Bạn chắc chứ? Có! Tốt.", ["Bạn chắc chứ?", "Có!", "Tốt."]),
        ("Xem mục 2. Sau đó đóng.", ["Xem mục 2. Sau đó đóng."]),  # a number, not an end
        ("Use e.g. Vim here. Then quit.", ["Use e.g. Vim here.", "Then quit."]),
        ("Dùng vd. Vim ở đây.", ["Dùng vd. Vim ở đây."]),
        ("Written by J. Smith today.", ["Written by J. Smith today."]),
        ("version 2.5 is out. done", ["version 2.5 is out. done"]),  # lower case follows
        ('He said "Stop." Then left.', ['He said "Stop."', "Then left."]),
        ("", []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    "a, b",
    [("_Open File", "open file"), ("&Save  as…", "save as…"), ("Ca\u0300 phê", "Cà phê")],
)
def test_normalise_source_equates(a, b):
    assert normalise_source(a) == normalise_source(b)


@pytest.mark.parametrize(
    "src, tgt, reason",
    [
        ("", "Mở", "empty side"),
        ("Open file", " ", "empty side"),
        ("Open _file", "Open file", "untranslated"),
        ("Open", "Mở", "source under 2 words"),
        ("Open %s file", "Mở tệp", ""),  # mismatched placeholders are allowed to stay
        ("Open file", "Mở tệp", ""),
    ],
)
def test_is_junk(src, tgt, reason):
    assert is_junk(src, tgt) == reason


def table(rows):
    src, tgt, origin = zip(*rows)
    ids = [f"{o}:{i}" for i, o in enumerate(origin)]
    columns = {"src": list(src), "tgt": list(tgt), "origin": list(origin), "id": ids, "context": [""] * len(src)}
    return pa.table(columns)


def test_dedupe_keeps_first_origin_in_sorted_order():
    out = dedupe_pairs(table([("Open file", "Mở tệp", "b/x"), ("Open file", "Mở tệp", "a/y")]))
    assert out["origin"].to_pylist() == ["a/y"]


def test_clean_heldout_drops_train_sources_junk_and_repeats():
    held = table([("Open the file", "Mở tệp", "d/x"), ("_Open the File", "Mở tệp ra", "d/x"),
                  ("Save the file", "Lưu tệp", "d/x"), ("Quit", "Thoát", "d/x")])  # fmt: skip
    assert clean_heldout(held, set())["src"].to_pylist() == ["Open the file", "Save the file"]
    assert clean_heldout(held, {"save the file"})["src"].to_pylist() == ["Open the file"]


def test_choose_splits_holds_out_whole_catalogs_of_distinct_packages():
    rows = []
    for pkg in "abcdefgh":
        rows += [(f"{pkg} message number {i}", f"tin {pkg} {i}", f"{pkg}/cat") for i in range(30)]
    cfg = BuildConfig(dev_pairs=50, test_pairs=50, mono_catalog_pairs=30, heldout_min=20, heldout_max=40)
    splits = choose_splits(table(rows), cfg)
    held = splits.dev + splits.test + splits.mono
    assert len(splits.dev) == 2 and len(splits.test) == 2 and len(splits.mono) == 1
    assert len({origin_package(o) for o in held}) == len(held)
    assert choose_splits(table(rows), cfg) == splits  # deterministic for a seed


@pytest.mark.parametrize("origin, package", [("gimp-data/gimp20", "gimp-data"), ("local/apt/apt", "apt")])
def test_origin_package(origin, package):
    assert origin_package(origin) == package


def test_html_paragraphs_skip_code_and_navigation():
    html = "<head><title>T</title></head><body><nav>Menu</nav><p>Một  câu.</p><pre>make</pre><li>Hai</li></body>"
    assert html_paragraphs(html) == ["Một câu.", "Hai"]


def test_man_paragraphs():
    troff = '.\\" comment\n.TH LS 1\n.SH TÊN\nls \\- liệt kê\n.PP\nHiển thị \\fBtệp\\fP và\nthư mục.\n.B \"đậm\"\n'
    assert man_paragraphs(troff) == ["ls - liệt kê", "Hiển thị tệp và thư mục. đậm"]  # headings dropped


@pytest.mark.parametrize(
    "text, expected",
    [("Hiển thị tệp và thư mục.", True), ("Show files and folders.", False), ("", False)],
)
def test_looks_vietnamese(text, expected):
    assert looks_vietnamese(text) is expected


def test_read_package_list(tmp_path):
    path = tmp_path / "packages.txt"
    path.write_text("# comment\ngimp-data  # big\n\napt\ngimp-data\n", encoding="utf-8")
    assert read_package_list(path) == ["gimp-data", "apt"]
