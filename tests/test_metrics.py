"""Metrics are sacreBLEU's: parity with its corpus functions, signatures kept beside scores."""

from __future__ import annotations

import pytest
import sacrebleu

from mtcore.nmt.metrics import corpus_bleu, corpus_chrf, score_translations

HYPS = ["Mở tệp mới", "con mèo ở đây", "Không thể đọc thư mục %s.", "cửa sổ"]
REFS = ["Mở tập tin mới", "con mèo ở đây", "Không thể đọc thư mục %s.", "cửa sổ đỏ"]
REFS2 = ["Mở một tệp mới", "có con mèo ở đây", "Không đọc được thư mục %s.", "cửa sổ"]


@pytest.mark.parametrize("refs", [REFS, [REFS, REFS2]])
def test_bleu_equals_sacrebleu_and_returns_its_signature(refs):
    streams = [refs] if isinstance(refs[0], str) else refs
    expected = sacrebleu.corpus_bleu(HYPS, streams)
    got = corpus_bleu(HYPS, refs)
    assert got.score == pytest.approx(expected.score)
    assert got.signature.startswith(f"nrefs:{len(streams)}|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert "BLEU" in str(got)


def test_chrf_equals_sacrebleu():
    assert corpus_chrf(HYPS, REFS).score == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert corpus_chrf(HYPS, REFS, word_order=2).score == pytest.approx(
        sacrebleu.corpus_chrf(HYPS, [REFS], word_order=2).score
    )
    assert "nc:6|nw:0" in corpus_chrf(HYPS, REFS).signature


@pytest.mark.parametrize(
    "hyps, refs, bleu",
    [(["con mèo ở đây"], ["con mèo ở đây"], 100.0), (["xin chào"], ["tạm biệt bạn"], 0.0)],
)
def test_extremes(hyps, refs, bleu):
    assert corpus_bleu(hyps, refs).score == pytest.approx(bleu)


def test_mismatched_lengths_are_an_error():
    with pytest.raises(ValueError, match="2 hypotheses but a reference stream of 1 lines"):
        corpus_bleu(["a", "b"], ["a"])


def test_score_translations_uses_the_platform_names():
    scores = score_translations(HYPS, REFS, prefix="dev")
    assert set(scores) == {"dev/bleu", "dev/chrf", "dev/bleu_signature", "dev/chrf_signature"}
    assert scores["dev/bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)


@pytest.mark.parametrize("lang, tokenize", [("vi", "13a"), ("en", "13a"), (None, "13a"), ("zh", "zh"), ("zh-TW", "zh"),
                                            ("th", "char")])
def test_bleu_tokenizes_as_sacrebleus_command_line_does_for_the_target_language(lang, tokenize):
    from mtcore.nmt.metrics import bleu_tokenize

    assert bleu_tokenize(lang) == tokenize


def test_chinese_bleu_is_not_scored_on_whole_sentences():
    """With 13a a Chinese sentence is one token: BLEU 0 for a near-perfect translation (found on an en→zh run)."""
    hyps, refs = ["我喜欢这本新书。", "打开文件夹"], ["我很喜欢这本新书。", "打开这个文件夹"]
    scores = score_translations(hyps, refs, tgt_lang="zh")
    assert scores["test/bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="zh").score)
    assert scores["test/bleu"] > 40
    assert "tok:zh" in scores["test/bleu_signature"] and corpus_bleu(hyps, refs).score < 1


def test_japanese_without_mecab_is_scored_on_characters_and_says_so():
    from mtcore.nmt.metrics import bleu_tokenize

    import importlib.util

    tok = bleu_tokenize("ja")
    if importlib.util.find_spec("MeCab") is not None:  # sacrebleu[ja]
        assert tok == "ja-mecab"
    else:
        assert tok == "char" and "tok:char" in score_translations(["猫です"], ["猫です"], tgt_lang="ja")["test/bleu_signature"]


def test_references_typed_with_combining_marks_score_as_their_nfc_form():
    import unicodedata

    nfd = [unicodedata.normalize("NFD", r) for r in REFS]
    assert nfd != REFS
    assert corpus_bleu(HYPS, nfd).score == pytest.approx(corpus_bleu(HYPS, REFS).score)
    assert corpus_chrf(HYPS, nfd).score == pytest.approx(corpus_chrf(HYPS, REFS).score)


# A model never writes the invisible characters `tokenizer.normalize` takes out of every training text: a reference
# holding one lost the words around it (soft hyphen: BLEU 35.4 for an exact match; Khmer's zero-width spaces between
# words; an Arabic reference opening with a right-to-left mark).
INVISIBLE_CASES = [
    (["Open the cooperative file"], ["Open the co\u00adoperative file"], "13a"),
    (["ខ្ញុំស្រលាញ់ភាសាខ្មែរ"], ["ខ្ញុំ\u200bស្រលាញ់\u200bភាសា\u200bខ្មែរ"], "char"),
    (["مرحبا بالعالم الجميل في هذا الصباح المشمس"], ["\u200fمرحبا بالعالم الجميل في هذا الصباح المشمس"], "13a"),
    (["Save\u2060 the file to disk"], ["\ufeffSave the file to disk\u200e"], "13a"),  # on the hypothesis side too
]


@pytest.mark.parametrize("hyps, refs, tokenize", INVISIBLE_CASES)
def test_invisible_characters_the_model_cannot_write_do_not_cost_a_match(hyps, refs, tokenize):
    assert sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize).score < 90  # what sacreBLEU alone gives
    assert corpus_bleu(hyps, refs, tokenize=tokenize).score == pytest.approx(100.0)
    assert corpus_chrf(hyps, refs).score == pytest.approx(100.0)
    assert corpus_bleu(hyps, [refs, refs], tokenize=tokenize).score == pytest.approx(100.0)  # every reference stream


def test_the_signature_is_sacrebleus_plus_mtcores_preprocessing():
    bleu, chrf = corpus_bleu(HYPS, REFS), corpus_chrf(HYPS, REFS)
    theirs = sacrebleu.BLEU(), sacrebleu.CHRF()
    for metric in theirs:
        metric.corpus_score(HYPS, [REFS])  # a signature counts the references
    assert bleu.signature == f"{theirs[0].get_signature()}|mtcore:nfc+no-invisible"
    assert chrf.signature == f"{theirs[1].get_signature()}|mtcore:nfc+no-invisible"
    assert score_translations(HYPS, REFS)["test/bleu_signature"].endswith("|mtcore:nfc+no-invisible")
    # ZWJ/ZWNJ are text (Persian, Indic scripts, emoji), as the tokenizer keeps them: they still count
    assert corpus_chrf(["می\u200cخواهم"], ["میخواهم"]).score < 100
