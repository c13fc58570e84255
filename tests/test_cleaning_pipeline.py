"""mtcore.cleaning.pipeline: reconciliation, global de-duplication, Ray Data == in process."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mtcore.cleaning import build_config, clean_dataset, clean_table, load_config
from mtcore.data.ledger import REJECT_SCHEMA

GOOD = [
    ("Cannot open file %s", "Không thể mở tập tin %s"),
    ("Save the document before closing?", "Lưu tài liệu trước khi đóng?"),
    ("Page %d of %d", "Trang %d trên %d"),
    ("Connection to the server was lost.", "Mất kết nối tới máy chủ."),
    ("Delete %(count)d messages", "Xóa %(count)d thư"),
    ("<b>Warning:</b> the disk is almost full", "<b>Cảnh báo:</b> đĩa gần đầy"),
    ("Hanoi", "Hà Nội"),
    ("OK", "OK"),
]
NOISY = [
    ("File not found on the server", "File not found on the server"),  # untranslated
    ("Cannot open file %s", "Không thể mở tập tin"),  # placeholder dropped
    ("The file could not be opened", "Le fichier n'a pas pu être ouvert"),  # French
    ("Connection lost", "Máº¥t káº¿t ná»‘i"),  # mojibake
    ("Open", "   "),  # empty
]


def corpus(n_repeats: int = 1) -> pa.Table:
    """Distinct pairs (numbered), exact and normalised duplicates, noise; ids not in input order."""
    rows = []
    for r in range(n_repeats):
        for i, (s, t) in enumerate(GOOD):
            rows.append((f"{s} ({r})", f"{t} ({r})"))
        for s, t in NOISY:
            rows.append((f"{s} {r}", f"{t} {r}" if t.strip() else t))
        rows.append((f"Save the document before closing? ({r})", f"Lưu tài liệu trước khi đóng? ({r})"))  # exact dup
        rows.append((f"save the document before closing ({r})", f"lưu tài liệu trước khi đóng ({r})"))  # normalised dup
    n = len(rows)
    ids = [f"id{(i * 7919) % n:07d}" for i in range(n)]  # a permutation: duplicates are not always later rows
    return pa.table({"src": [r[0] for r in rows], "tgt": [r[1] for r in rows], "origin": ["test"] * n, "id": ids})


def no_overlap_config():
    cfg = load_config()
    cfg.rules = [r for r in cfg.rules if r.name() != "TestOverlap"]
    return cfg


def test_counts_reconcile_and_reasons():
    table = corpus(3)
    kept, rejects, report = clean_table(table, no_overlap_config())
    assert report.input == len(table) == len(kept) + len(rejects)
    assert report.input == report.kept + sum(report.rejected.values())
    assert rejects.schema == REJECT_SCHEMA
    assert set(report.rejected) >= {"untranslated", "placeholder_mismatch", "wrong_language", "encoding_noise", "empty", "duplicate", "near_duplicate"}
    assert report.rejected["duplicate"] == 3 and report.rejected["near_duplicate"] == 3
    assert set(rejects.column("stage").to_pylist()) == {"clean"}


def test_duplicates_keep_first_by_id():
    table = pa.table(
        {
            "src": ["Open the file now", "Open the file now", "open the file now!"],
            "tgt": ["Mở tập tin ngay", "Mở tập tin ngay", "mở tập tin ngay!"],
            "origin": ["a", "b", "c"],
            "id": ["b-2", "a-1", "c-3"],
        }
    )
    kept, rejects, report = clean_table(table, build_config(["NonEmpty", "Duplicates"]))
    assert kept.column("id").to_pylist() == ["a-1"]
    by_id = dict(zip(rejects.column("id").to_pylist(), rejects.column("reason").to_pylist()))
    assert by_id == {"b-2": "duplicate", "c-3": "near_duplicate"}
    assert "a-1" in rejects.column("detail")[0].as_py()


def test_duplicates_of_a_text_file_keep_the_earlier_line():
    """NAME:LINE ids sorted as text put line 10 before line 2: the later line was kept."""
    table = pa.table({"src": ["Open the file now", "Save it", "Open the file now"], "tgt": ["Mở tập tin ngay", "Lưu", "Mở tập tin ngay"],
                      "origin": ["dup.tsv"] * 3, "id": ["dup.tsv:2", "dup.tsv:3", "dup.tsv:10"]})
    kept, rejects, _ = clean_table(table, build_config(["NonEmpty", "Duplicates"]))
    assert kept.column("id").to_pylist() == ["dup.tsv:2", "dup.tsv:3"]
    assert rejects.column("id").to_pylist() == ["dup.tsv:10"] and rejects.column("detail")[0].as_py() == "duplicate of id dup.tsv:2"
    plural = table.set_column(3, "id", pa.array(["m.po:40", "m.po:3", "m.po:5/1"]))  # a catalog's plural form at line 5
    kept, rejects, _ = clean_table(plural, build_config(["NonEmpty", "Duplicates"]))
    assert rejects.column("id").to_pylist() == ["m.po:40"]


def test_same_result_in_any_batch_size():
    table, cfg = corpus(20), no_overlap_config()
    a = clean_table(table, cfg, batch_size=4096)
    b = clean_table(table, cfg, batch_size=7)
    assert sorted(a[0].column("id").to_pylist()) == sorted(b[0].column("id").to_pylist())
    assert a[2].rejected == b[2].rejected


@pytest.mark.slow
def test_ray_data_equals_in_process(ray_local, tmp_path):
    table = corpus(1000)  # 15,000 pairs in 15 row groups: Ray Data's parallel Parquet read reordered such a file
    assert len(table) >= 15000
    path = tmp_path / "raw.parquet"
    pq.write_table(table, path, row_group_size=1000)
    cfg = no_overlap_config()
    kept, rejects, report = clean_table(table, cfg)

    result = clean_dataset(path, tmp_path / "out", cfg, rows_per_block=2000)  # several blocks: dedup is global
    assert not result.skipped
    ray_kept = pq.read_table(tmp_path / "out" / "kept")
    ray_rej = pq.read_table(tmp_path / "out" / "rejects")
    key = lambda t: sorted(zip(t.column("id").to_pylist(), t.column("src").to_pylist(), t.column("tgt").to_pylist()))  # noqa: E731
    assert key(ray_kept) == key(kept)
    # In the input's order, run after run: a split or a training order made from the output is reproducible.
    assert ray_kept.column("id").to_pylist() == kept.column("id").to_pylist()
    clean_dataset(path, tmp_path / "again", cfg, rows_per_block=2000)
    assert pq.read_table(tmp_path / "again" / "kept").equals(ray_kept)
    rkey = lambda t: sorted(zip(t.column("id").to_pylist(), t.column("reason").to_pylist(), t.column("detail").to_pylist()))  # noqa: E731
    assert rkey(ray_rej) == rkey(rejects)
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["input"] == report.input and saved["kept"] == report.kept and saved["rejected"] == report.rejected
    assert saved["reconciled"] and saved["normalized_rows"] == report.extra["normalized_rows"]
    assert not (tmp_path / "out" / "_scored").exists()

    again = clean_dataset(path, tmp_path / "out", cfg)  # outputs exist: skipped
    assert again.skipped and again.report["kept"] == report.kept


def test_a_rule_rejecting_most_of_a_corpus_is_said_with_its_likely_cause(caplog):
    """English-German cleaned as en-vi: every pair `wrong_language`, exit 0 and not a word."""
    from mtcore.cleaning.config import load_config
    from mtcore.cleaning.pipeline import warn_dominant_rejects

    with caplog.at_level("WARNING", logger="mtcore.cleaning.pipeline"):
        warn_dominant_rejects({"input": 160, "kept": 0, "rejected": {"wrong_language": 150, "empty": 10}}, load_config())
        warn_dominant_rejects({"input": 160, "kept": 100, "rejected": {"wrong_language": 60}}, load_config())
    assert caplog.text.count("rejected") == 1
    assert "wrong_language rejected 150 of 160 pairs (94 %); is the corpus en-vi, source first? pass its languages with --langs" in caplog.text


def test_the_duplicates_index_is_built_once_for_every_batch_of_the_split():
    """The split looked each 65,536-row batch up in an index it built again each time: O(duplicates) per batch."""
    import numpy as np

    from mtcore.cleaning.pipeline import DuplicateDecision

    dups = DuplicateDecision(np.array([5, 9], dtype=np.uint64), np.array(["duplicate"] * 2, dtype=object),
                             np.array(["duplicate of id a", "duplicate of id b"], dtype=object))
    assert dups.index() is dups.index()
    assert dups.index().get_indexer(np.array([9, 1, 5], dtype=np.uint64)).tolist() == [1, -1, 0]
