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
