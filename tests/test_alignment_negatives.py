"""Near-miss negatives made from the corpus: each kind on tiny real catalog-style cases."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mtcore.alignment.devset import build_near_miss_dev
from mtcore.alignment.negatives import fuzzy_partners, neighbour_partners, partial_translation, swap_detail, synthetic_targets

SRC = ["Show hidden files", "Show backup files", "Open the file", "Open the file", "Quit", "Show hidden files now"]
TGT = ["Hiện tập tin ẩn", "Hiện tập tin sao lưu", "Mở tập tin", "Mở tệp", "Thoát", "Hiện tập tin ẩn ngay"]
ORIGIN = ["a", "a", "a", "a", "a", "b"]


def test_fuzzy_partner_is_the_most_similar_source_of_the_same_origin():
    p = fuzzy_partners(SRC, TGT, ORIGIN)
    assert p[0] == 1 and p[1] == 0  # "Show hidden files" ↔ "Show backup files" (Jaccard 0.5), not origin b's row
    assert p[2] not in (3,)  # same words ("Open the file" twice): the same message, never a negative
    assert p[5] == -1  # alone in its origin


def test_fuzzy_partner_skips_rows_with_the_same_translation():
    p = fuzzy_partners(["Cannot open file", "Could not open file"], ["Không thể mở tập tin", "Không thể mở tập tin"], ["x", "x"])
    assert list(p) == [-1, -1]


def test_neighbour_partner_is_the_next_row_of_the_same_origin():
    p = neighbour_partners(TGT, ORIGIN)
    assert list(p[:5]) == [1, 2, 3, 4, 3] and p[5] == -1


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Không thể mở tập tin, hãy thử lại", "Không thể mở tập tin,"),  # last clause dropped
        ("Lưu tập tin. Thoát chương trình.", "Lưu tập tin."),
        ("Thoát", None),  # too short to cut
    ],
)
def test_partial_translation(text, expected):
    assert partial_translation(text, np.random.default_rng(0)) == expected


def test_partial_translation_without_clauses_drops_words():
    out = partial_translation("Chọn một thiết bị để quản lý nó", np.random.default_rng(0))
    assert out and "Chọn một thiết bị".startswith(out[:10]) and len(out.split()) < 7


@pytest.mark.parametrize(
    "text, pool, changed",
    [
        ("Chờ 5 giây", [], "5"),  # a number changes
        ("Dùng tùy chọn --verbose", ["Xem --help"], "--verbose"),  # an option swapped for another of the catalog
        ("Không mở được %s", [], "%s"),  # a placeholder changes type
    ],
)
def test_swap_detail_changes_one_detail(text, pool, changed):
    out = swap_detail(text, pool, np.random.default_rng(1))
    assert out is not None and out != text and changed not in out


def test_swap_detail_none_without_details():
    assert swap_detail("mở tập tin", [], np.random.default_rng(0)) is None


def test_synthetic_targets_differ_from_the_originals():
    tgt = ["Chờ 5 giây rồi thử lại", "Thoát", "Không thể mở tập tin, hãy thử lại"]
    rows, new, kinds = synthetic_targets(tgt, ["a"] * 3, np.arange(3), seed=0)
    assert 1 not in rows  # "Thoát": nothing to cut or swap
    assert all(n != tgt[r] for r, n in zip(rows, new)) and set(kinds) <= {"partial", "swap"}


def test_dev_set_drops_the_older_message_of_an_outdated_translation():
    src = [f"Show {w} files" for w in ("hidden", "backup", "recent", "shared", "system", "large")] + [f"Message number {i} here" for i in range(20)]
    tgt = [f"Hiện tập tin {w}" for w in ("ẩn", "sao lưu", "gần đây", "chia sẻ", "hệ thống", "lớn")] + [f"Thông điệp số {i} ở đây" for i in range(20)]
    t = pa.table({"src": src, "tgt": tgt, "origin": ["a"] * len(src), "id": [f"{i:03d}" for i in range(len(src))]})
    dev = build_near_miss_dev(t, share=0.2, seed=0)
    bad = [r for r in dev.to_pylist() if r["label"] == 1]
    assert bad and {r["kind"] for r in bad} <= {"version", "neighbour", "partial", "swap"}
    for r in bad:
        assert (r["src"], r["tgt"]) not in set(zip(src, tgt))  # every misaligned row really changed
    for r in (r for r in bad if r["kind"] == "version"):  # its target now appears once: the old message is gone
        assert [x["tgt"] for x in dev.to_pylist()].count(r["tgt"]) == 1


def test_a_large_origin_is_searched_in_windows_and_calibration_draws_some_of_them():
    """One origin was one quadratic search: a 10M-row TSV (a single origin) could never end, nor fit in memory."""
    from mtcore.alignment.negatives import fuzzy_windows

    src = ["show hidden files", "show backup files", "show hidden folders", "open the file", "open the files now",
           "open a file", "close all"]
    tgt = [f"t{i}" for i in range(len(src))]
    assert fuzzy_partners(src, tgt, None, window=3).tolist() == [1, 0, 0, 5, 3, 3, -1]  # the last is alone in its window
    assert fuzzy_partners(src, tgt, None).tolist() == [1, 0, 0, 5, 3, 3, -1]  # one window, the same partners here
    windows = fuzzy_windows(None, 10, window=2, max_rows=4, seed=1)
    assert [len(w) for w in windows] == [2, 2]
    assert [w.tolist() for w in windows] == [w.tolist() for w in fuzzy_windows(None, 10, window=2, max_rows=4, seed=1)]
    drawn = fuzzy_partners(src, tgt, None, window=3, max_rows=3, seed=0)
    assert sorted(np.flatnonzero(drawn >= 0).tolist()) in ([0, 1, 2], [3, 4, 5])  # one window drawn of the two
