"""The `select_mono` stage: held-out targets, corpus targets and repeats are set aside with their reason; the budget
is a seeded sample of the rest; counts reconcile."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mtcore.backtranslation import BTConfig, BTError
from mtcore.backtranslation.pipeline import stage_select
from mtcore.backtranslation.select import select_mono
from mtcore.backtranslation.stages import StageDir
from mtcore.data.corpus import write_parquet


def mono_table(texts):
    return pa.table({"text": texts, "origin": ["m"] * len(texts), "id": [f"m{i}" for i in range(len(texts))]})


def test_each_exclusion_has_its_reason_and_the_counts_reconcile():
    texts = ["Mở tệp mới", "Lưu tệp.", "Đóng cửa sổ", "mở TỆP mới!", "In trang", "Xoá thư mục", "Thoát"]
    real = pa.array(["Lưu tệp", "Khác"])        # "Lưu tệp." is a real target once normalised
    heldout = pa.array(["Đóng cửa sổ"])         # a test reference
    sel = select_mono(mono_table(texts), real, heldout, budget=2, seed=0)
    reasons = dict(zip(sel.rejects["src"].to_pylist(), sel.rejects["reason"].to_pylist()))
    assert reasons.pop("Lưu tệp.") == "in_corpus"
    assert reasons.pop("Đóng cửa sổ") == "test_overlap"
    assert reasons.pop("mở TỆP mới!") == "duplicate"  # the first spelling is the one that may be chosen
    assert set(reasons.values()) == {"over_ratio"} and len(sel.kept) == 2 and sel.eligible == 4
    assert len(sel.kept) + len(sel.rejects) == len(texts)
    assert set(sel.kept["text"].to_pylist()) <= {"Mở tệp mới", "In trang", "Xoá thư mục", "Thoát"}
    assert sel.kept["id"].to_pylist() == sorted(sel.kept["id"].to_pylist(), key=lambda i: int(i[1:]))  # file order


def test_without_exclusions_the_draw_is_the_seeded_sample_it_always_was():
    texts = [f"câu số {i}" for i in range(50)]
    sel = select_mono(mono_table(texts), pa.array([], pa.string()), pa.array([], pa.string()), budget=10, seed=3)
    expected = np.sort(np.random.default_rng(3).permutation(50)[:10])
    assert sel.kept["id"].to_pylist() == [f"m{i}" for i in expected]
    assert set(sel.rejects["reason"].to_pylist()) == {"over_ratio"}


def test_nothing_left_to_translate_is_an_error_naming_why(tmp_path):
    corpus = pa.table({"src": ["Open the file"], "tgt": ["Mở tệp"], "origin": ["c"], "id": ["c0"]})
    write_parquet(corpus, tmp_path / "aligned" / "part-0.parquet")
    cfg = BTConfig(corpus="x", mono="y", output=str(tmp_path / "out"))
    stage = StageDir(tmp_path / "out", "04_select_mono", {})
    with pytest.raises(BTError, match=r"none of its 2 sentences.*'in_corpus': 2"):
        stage_select(cfg, stage, mono_table(["Mở tệp", "mở tệp"]), tmp_path / "aligned", 1)
