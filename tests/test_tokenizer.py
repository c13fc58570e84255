"""SentencePiece: joint vocabulary, reserved symbols, exact round-trip of Vietnamese (NFC)."""

from __future__ import annotations

import unicodedata

import pytest

from mtcore.nmt.tokenizer import BOS_ID, BT_TAG, EOS_ID, PAD_ID, Tokenizer, TokenizerError, train_tokenizer

CORPUS = [
    "Mở tập tin để đọc",
    "Open the file to read",
    "Không thể lưu tài liệu “%s”: đĩa đã đầy.",
    "Could not save document “%s”: the disk is full.",
    "Tiếng Việt có sáu thanh: ngang, huyền, sắc, hỏi, ngã, nặng.",
    "Đường dẫn\nkhông hợp lệ",
] * 40


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer(CORPUS, tmp_path_factory.mktemp("spm") / "spm.model", vocab_size=500)


@pytest.mark.parametrize(
    "text",
    [
        "Mở tập tin để đọc",
        "Không thể lưu tài liệu “%s”: đĩa đã đầy.",
        "Người dùng ưa thích phở Hà Nội",  # letters not all seen in training
        "Ký tự lạ: 😀 ÷ 日本",  # byte fallback instead of ⁇
    ],
)
def test_roundtrip_is_exact(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode([text])) == [text]


def test_whitespace_is_folded_as_the_cleaning_stage_folds_it(tokenizer):
    """A raw dev/test or translation input meets the pieces of a cleaned training set: a newline, tab or
    no-break space is one space (before, `\n` became an untrained `<nl>` and a tab or NBSP byte pieces)."""
    from mtcore.cleaning.normalize import normalize_table
    import pyarrow as pa

    raw = ["Đường dẫn\nkhông\thợp lệ", "Mở\u00a0tập  tin\r\n", "\u2028Mở\u3000tài liệu "]
    folded, _ = normalize_table(pa.table({"src": raw, "tgt": raw}))
    assert tokenizer.encode(raw) == tokenizer.encode(folded.column("src").to_pylist())
    assert tokenizer.decode(tokenizer.encode(raw)) == folded.column("src").to_pylist()
    assert not any(p.startswith("<0x") or p == "<nl>" for pieces in tokenizer.encode_pieces(raw) for p in pieces)


def test_decomposed_input_comes_back_nfc(tokenizer):
    decomposed = unicodedata.normalize("NFD", "Tiếng Việt")
    assert decomposed != "Tiếng Việt"
    assert tokenizer.decode(tokenizer.encode([decomposed])) == ["Tiếng Việt"]


def test_special_ids_and_reserved_tag(tokenizer):
    assert (tokenizer.sp.pad_id(), tokenizer.sp.bos_id(), tokenizer.sp.eos_id()) == (PAD_ID, BOS_ID, EOS_ID)
    assert tokenizer.encode_pieces([f"{BT_TAG} Xin chào"])[0][:2] in ([BT_TAG, "▁"], ["▁", BT_TAG])
    assert tokenizer.bt_tag_id in tokenizer.encode([f"{BT_TAG} Xin chào"])[0]
    # special ids are dropped on decode
    assert tokenizer.decode([[BOS_ID] + tokenizer.encode(["Xin chào"])[0] + [EOS_ID, PAD_ID]]) == ["Xin chào"]


def test_vocab_too_small_is_a_clear_error(tmp_path):
    with pytest.raises(TokenizerError, match="vocab_size 50 is too small"):
        train_tokenizer(CORPUS, tmp_path / "s.model", vocab_size=50)


def test_empty_corpus_and_missing_model(tmp_path):
    with pytest.raises(TokenizerError, match="empty corpus"):
        train_tokenizer(["", "  "], tmp_path / "s.model")
    with pytest.raises(TokenizerError, match="not found"):
        Tokenizer(tmp_path / "missing.model")


def test_a_sampled_corpus_gives_the_same_vocabulary_in_every_process(tmp_path):
    """Over `max_sentences`, SentencePiece samples the corpus with a generator seeded from the clock: two processes
    trained two different tokenizers on the same corpus."""
    import subprocess
    import sys

    script = (
        "import hashlib, random, sys\n"
        "from mtcore.nmt.tokenizer import train_tokenizer\n"
        "r = random.Random(0)\n"
        "words = ['a', 'bb', 'ccc', 'dd', 'e', 'ff', 'ggg', 'hh', 'ii', 'jjj', 'k', 'lll']\n"
        "texts = [' '.join(r.choice(words) + r.choice(['x', 'yy', 'zz', 'w']) for _ in range(6)) for _ in range(3000)]\n"
        "train_tokenizer(texts, sys.argv[1], vocab_size=300, max_sentences=101)\n"
        "print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())\n"
    )
    digests = {subprocess.run([sys.executable, "-c", script, str(tmp_path / f"{i}.model")], capture_output=True, text=True,
                              check=True).stdout.strip() for i in range(3)}
    assert len(digests) == 1


def test_a_vocabulary_too_small_names_the_setting_of_each_command(tmp_path):
    """It named `job.character_coverage`, which train_encoder has not got."""
    from mtcore.nmt.tokenizer import TokenizerError

    with pytest.raises(TokenizerError, match="job.vocab_size=N; train_encoder: --vocab-size N"):
        train_tokenizer(["下载更新时出错", "请稍后再试", "你确定吗"] * 20 + ["abc"], tmp_path / "t.model", vocab_size=40)
