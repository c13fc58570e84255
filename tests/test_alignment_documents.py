"""Document alignment: the DP recovers planted alignments (1-2, 2-1, deletions, insertions) from hand-made embeddings."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from mtcore.alignment.documents import (
    Block,
    DocAlignConfig,
    align_documents,
    alignment_types,
    read_document,
    split_sentences,
    strict_f1,
    write_alignment,
)


class AtomEncoder:
    """Texts are '+'-joined atoms ('3', '8a+8b'); a text's vector is the normalised sum of its atoms'.

    Atoms share a common direction (random pairs have cosine ≈ 0.3, as real sentence
    embeddings do) and every text gets its own noise; target texts carry a '~' so that
    a translation is never the very same vector (translations have cosine ≈ 0.9).
    """

    dim = 64

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.common = rng.normal(size=self.dim)
        self.common /= np.linalg.norm(self.common)

    def _atom(self, atom: str) -> np.ndarray:
        g = np.random.default_rng(zlib.crc32(atom.encode())).normal(size=self.dim)
        v = g / np.linalg.norm(g) + 0.6 * self.common
        return v / np.linalg.norm(v)

    def encode(self, texts, batch_size: int = 0) -> np.ndarray:
        out = []
        for t in texts:
            atoms = t.replace("~", "").replace(" ", "+").split("+")
            v = sum(self._atom(a) for a in atoms if a)
            noise = np.random.default_rng(zlib.crc32(t.encode()) + 1).normal(size=self.dim)
            v = v / np.linalg.norm(v) + 0.25 * noise / np.linalg.norm(noise)
            out.append(v / np.linalg.norm(v))
        return np.array(out, dtype=np.float32)


def planted(n: int = 40):
    """Source atoms 0..n-1 with a 2-1 merge, a 1-2 split, a deletion and an insertion at known places."""
    src, tgt, gold = [], [], []
    i = 0
    while i < n:
        s, t = len(src), len(tgt)
        if i % 10 == 2:  # 2-1: two source sentences translated as one
            src += [f"{i}", f"{i + 1}"]
            tgt.append(f"~{i}+{i + 1}")
            gold.append(Block((s, s + 1), (t,), 0.0))
            i += 2
        elif i % 10 == 5:  # 1-2: one source sentence translated as two
            src.append(f"{i}a+{i}b")
            tgt += [f"~{i}a", f"~{i}b"]
            gold.append(Block((s,), (t, t + 1), 0.0))
            i += 1
        elif i % 10 == 7:  # 1-0: untranslated source sentence
            src.append(f"{i}")
            gold.append(Block((s,), (), 0.0))
            i += 1
        elif i % 10 == 0 and i:  # 0-1 then 1-1: the translator added a sentence (not next to a deletion,
            # where a deletion + insertion and a bad 1-1 are the same thing to any DP)
            tgt.append(f"~x{i}")
            gold.append(Block((), (t,), 0.0))
            src.append(f"{i}")
            tgt.append(f"~{i}")
            gold.append(Block((s,), (t + 1,), 0.0))
            i += 1
        else:
            src.append(f"{i}")
            tgt.append(f"~{i}")
            gold.append(Block((s,), (t,), 0.0))
            i += 1
    return src, tgt, gold


def _keys(blocks):
    return [(b.src, b.tgt) for b in blocks]


def test_alignment_types():
    assert alignment_types(4) == [(1, 0), (0, 1), (1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (3, 1)]


def test_dense_dp_recovers_planted_alignment():
    src, tgt, gold = planted(40)
    blocks = align_documents(src, tgt, AtomEncoder())
    assert _keys(blocks) == _keys(gold)


def test_coarse_to_fine_matches_dense():
    src, tgt, gold = planted(300)
    enc = AtomEncoder()
    dense = align_documents(src, tgt, enc, DocAlignConfig(dense_cells=10**9))
    banded = align_documents(src, tgt, enc, DocAlignConfig(dense_cells=2_000, band=6))
    assert strict_f1(dense, gold, include_deletions=True)["f1"] >= 0.98
    assert _keys(banded) == _keys(dense)


def test_blocks_cover_every_sentence_once():
    src, tgt, _ = planted(60)
    blocks = align_documents(src, tgt[5:], AtomEncoder())  # a target that starts late: leading deletions
    assert [i for b in blocks for i in b.src] == list(range(len(src)))
    assert [j for b in blocks for j in b.tgt] == list(range(len(tgt) - 5))


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_short_documents_keep_their_pairs(n):
    """A document of a few sentences has few random pairs: most are the true ones. Without background
    sentences every 1-1 of a one- or two-sentence pair cost as much as a random one and was deleted."""
    src, tgt = [f"{i}" for i in range(n)], [f"~{i}" for i in range(n)]
    assert _keys(align_documents(src, tgt, AtomEncoder())) == [((i,), (i,)) for i in range(n)]
    if n <= 2:  # the old estimate (no background) deletes them: the test would catch a regression to it
        old = align_documents(src, tgt, AtomEncoder(), DocAlignConfig(min_random=0))
        assert all(not b.src or not b.tgt for b in old)


def test_short_documents_still_delete_what_does_not_match():
    enc = AtomEncoder()
    assert sorted(b.kind for b in align_documents(["5"], ["~9"], enc)) == ["0-1", "1-0"]
    assert _keys(align_documents(["5", "6"], ["~5", "~9"], enc))[0] == ((0,), (0,))
    assert _keys(align_documents(["5a+5b"], ["~5a", "~5b"], enc)) == [((0,), (0, 1))]


def test_background_given_by_the_caller():
    bg = ([f"b{i}+c{i}" for i in range(40)], [f"~d{i}+e{i}" for i in range(40)])
    assert _keys(align_documents(["7"], ["~7"], AtomEncoder(), background=bg)) == [((0,), (0,))]


def test_long_documents_do_not_use_the_background():
    src, tgt, gold = planted(40)
    enc = AtomEncoder()
    noise = ([f"z{i}" for i in range(40)], [f"~y{i}" for i in range(40)])
    assert _keys(align_documents(src, tgt, enc, background=noise)) == _keys(align_documents(src, tgt, enc, DocAlignConfig(min_random=0)))


def test_free_deletions_are_refused():
    with pytest.raises(ValueError, match="--del-factor"):
        DocAlignConfig(del_factor=0)


def test_empty_side():
    blocks = align_documents(["0", "1"], [], AtomEncoder())
    assert _keys(blocks) == [((0,), ()), ((1,), ())]


@pytest.mark.parametrize(
    "paragraph, expected",
    [
        ("Debian is great. It is free!", ["Debian is great.", "It is free!"]),
        ("Use tools, e.g. dpkg. Then upload.", ["Use tools, e.g. dpkg.", "Then upload."]),
        ("Gói này tốt. Bạn nên dùng nó.", ["Gói này tốt.", "Bạn nên dùng nó."]),
        ("version 1.2.3 is out. ok", ["version 1.2.3 is out. ok"]),
        ('He said "no." Then he left.', ['He said "no."', "Then he left."]),  # a closing quote after the stop
        ("Nó nói “không.” Rồi đi.", ["Nó nói “không.”", "Rồi đi."]),
        ("1.1. Social dynamics of Debian", ["1.1. Social dynamics of Debian"]),  # a heading keeps its number
        ("A.2. Merging sources", ["A.2. Merging sources"]),
    ],
)
def test_split_sentences(paragraph, expected):
    assert split_sentences(paragraph) == expected


def test_read_document_unwraps_paragraphs_and_bullets(tmp_path):
    path = tmp_path / "doc.en.txt"
    path.write_text("Chapter 1\n\n  This is a wrapped\n  sentence. And another.\n\n  * a bullet\n    item\n  * next\n")
    assert read_document(path) == ["Chapter 1", "This is a wrapped sentence.", "And another.", "* a bullet item", "* next"]
    lines = tmp_path / "lines.txt"
    lines.write_text("one.\ntwo.\nthree.\n")
    assert read_document(lines) == ["one.", "two.", "three."]
    # a paragraph a line (text from HTML, a wiki dump): each line is cut, lines are not joined (a heading stays one)
    paragraphs = tmp_path / "paragraphs.txt"
    paragraphs.write_text("Installing\nRun the installer. Then reboot.\nOpen the menu. Choose Settings. Save.\n")
    assert read_document(paragraphs) == ["Installing", "Run the installer.", "Then reboot.", "Open the menu.",
                                         "Choose Settings.", "Save."]
    assert read_document(paragraphs, "lines")[1] == "Run the installer. Then reboot."


def test_write_alignment_formats(tmp_path):
    blocks = [Block((0,), (0, 1), 0.1), Block((1,), (), 0.3)]
    tsv = write_alignment(blocks, ["a", "b"], ["x", "y"], tmp_path / "out.tsv").read_text().splitlines()
    assert tsv[0].split("\t")[:3] == ["[0]", "[0, 1]", "0.1000"]
    jl = write_alignment(blocks, ["a", "b"], ["x", "y"], tmp_path / "out.jsonl").read_text().splitlines()
    assert '"tgt_text": "x y"' in jl[0]
    # Vecalign's own lines, which its score.py reads (the TSV is not its format); a zero cost is not "-0.000000"
    va = write_alignment(blocks + [Block((), (), -0.0)], ["a", "b"], ["x", "y"], tmp_path / "out.vecalign").read_text()
    assert va.splitlines() == ["[0]:[0, 1]:0.100000", "[1]:[]:0.300000", "[]:[]:0.000000"]


def test_write_alignment_keeps_one_row_per_block(tmp_path):
    """A carriage return or another line separator inside a sentence would split a TSV row for pandas and CSV tools."""
    rows = write_alignment([Block((0,), (0,), 0.1)], ["Second\rpart\u2028end"], ["x\x0by"], tmp_path / "o.TSV")
    assert rows.read_text().split("\n")[0].split("\t")[3:] == ["Second part end", "x y"]  # .TSV is a TSV too


def test_cost_penalty_limits():
    for bad in ({"max_size": 11}, {"merge_factor": -0.1}, {"merge_factor": float("nan")}):
        with pytest.raises(ValueError, match="--max-size|--merge-factor"):
            DocAlignConfig(**bad)


def test_merges_cost_more_with_a_merge_factor():
    """A long pair beside a short pair the encoder scores poorly: the merge penalty keeps them two 1-1 blocks."""
    src, tgt = ["0", "1", "2+3+4+5+6+7", "8", "9"], ["~0", "~1", "~2+3+4+5+6+7", "~x", "~9"]
    free = align_documents(src, tgt, AtomEncoder(), DocAlignConfig(merge_factor=0.0, min_random=0))
    costly = align_documents(src, tgt, AtomEncoder(), DocAlignConfig(merge_factor=2.0, min_random=0))
    assert ((2,), (2, 3)) in _keys(free)  # the long target swallowed the short one it scores poorly
    assert ((2,), (2,)) in _keys(costly) and ((), (3,)) in _keys(costly)


def test_strict_f1():
    gold = [Block((0,), (0,), 0), Block((1, 2), (1,), 0)]
    pred = [Block((0,), (0,), 0), Block((1,), (1,), 0), Block((2,), (), 0)]
    assert strict_f1(pred, gold) == {"precision": 0.5, "recall": 0.5, "f1": 0.5}


def test_chinese_and_japanese_paragraphs_are_cut_after_their_full_stops():
    """Sentences end in 。！？ with no space after: a Chinese paragraph stayed one sentence, and nothing aligned."""
    from mtcore.alignment.documents import split_sentences

    assert split_sentences("下载更新时出错。请稍后再试！你确定吗？「好的。」然后继续。") == [
        "下载更新时出错。", "请稍后再试！", "你确定吗？", "「好的。」", "然后继续。"]
    assert split_sentences("更新に失敗しました。 もう一度お試しください。") == ["更新に失敗しました。", "もう一度お試しください。"]
    assert split_sentences("本当？！それは無理。。。はい。") == ["本当？！", "それは無理。。。", "はい。"]
    assert split_sentences("Open the file. Then save it, e.g. as text.") == ["Open the file.", "Then save it, e.g. as text."]
