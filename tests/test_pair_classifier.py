"""The pair classifier (`align_filter --score classifier`): it learns to tell a translation from a near miss
that one pooled sentence vector cannot, it round-trips, it is tied to its encoder's pieces, and the stage uses it."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import roc_auc_score

from mtcore.alignment import negatives
from mtcore.alignment.classifier import (
    ClassifierConfig,
    ClassifierError,
    PairClassifier,
    PairScorer,
    classifier_dir,
    draw_negatives,
    build_negatives,
    ensure_classifier,
    load_pair_scorer,
    read_classifier_metrics,
    train_beside_encoder,
    trained_for,
)
from mtcore.alignment.filter import FilterConfig, FilterError, filter_corpus, filter_table
from mtcore.data.corpus import write_parquet
from mtcore.nmt.tokenizer import Tokenizer
from test_embedding import tiny_corpus, tiny_encoder

TINY = dict(hidden=32, epochs=40, batch_size=32, lr=3e-3, warmup=20, synthetic_rows=300)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A tiny trained encoder with its pair classifier, both trained on the tiny corpus's first 600 pairs."""
    tmp = tmp_path_factory.mktemp("enc")
    path = tiny_encoder(tmp, trained=True).save(tmp / "encoder")
    train_beside_encoder(tiny_corpus().slice(0, 600), path, ClassifierConfig(**TINY), track=False)
    return str(path)


def fuzzy_pairs(table):
    """Held-out pairs and, for each, the target of the message sharing the most words with it ("Open the
    new file" with the translation of "Open the new folder"): one changed word."""
    src, tgt, origins = table["src"].to_pylist(), table["tgt"].to_pylist(), table["origin"].to_pylist()
    partner = negatives.fuzzy_partners(src, tgt, origins)
    ok = np.flatnonzero(partner >= 0)
    return [src[i] for i in ok], [tgt[i] for i in ok], [tgt[j] for j in partner[ok]]


def test_training_teaches_the_classifier_one_changed_word(encoder_dir):
    src, good, near = fuzzy_pairs(tiny_corpus().slice(600))
    assert len(src) >= 150
    labels = np.r_[np.ones(len(src)), np.zeros(len(src))]
    trained = load_pair_scorer(encoder_dir)
    untrained = PairScorer(PairClassifier(trained.model.cfg).eval(), trained.tokenizer)
    auc = {name: roc_auc_score(labels, np.r_[s.score(src, good), s.score(src, near)]) for name, s in (("trained", trained), ("untrained", untrained))}
    assert auc["trained"] >= 0.9 and auc["untrained"] < 0.75, auc


def test_training_computes_in_bf16_only_where_the_cpu_has_it(encoder_dir, monkeypatch, tmp_path):
    import shutil

    import torch

    from mtcore import hardware
    from mtcore.alignment.classifier import train_classifier
    from mtcore.embedding.encoder import SPM_FILE

    t = tiny_corpus().slice(0, 600)
    tok = Tokenizer(f"{encoder_dir}/{SPM_FILE}")
    args = (t["src"].to_pylist(), t["tgt"].to_pylist(), t["origin"].to_pylist(), tok)
    runs = {}
    for native, want in ((False, True), (False, False), (True, True)):
        monkeypatch.setattr(hardware, "cpu_bf16_is_fast", lambda: native)
        runs[native, want] = train_classifier(*args, ClassifierConfig(**(TINY | {"epochs": 2, "bf16": want})))
    (fp32, m32), (asked, m_asked), (bf16, m16) = runs[False, False], runs[False, True], runs[True, True]
    assert m32["precision"] == m_asked["precision"] == "fp32" and m16["precision"] == "bf16"
    assert all(torch.equal(v, asked.state_dict()[k]) for k, v in fp32.state_dict().items())  # no bf16 CPU: the fp32 run
    assert not torch.equal(fp32.head[3].weight, bf16.head[3].weight)
    assert all(p.dtype == torch.float32 for p in bf16.parameters())  # weights stay fp32
    # trained as the module's fixture is, but in bf16, it learns the one changed word as well
    encoder = shutil.copytree(encoder_dir, tmp_path / "encoder")
    train_beside_encoder(t, encoder, ClassifierConfig(**TINY), track=False)
    scorer = load_pair_scorer(encoder)
    assert read_classifier_metrics(classifier_dir(encoder))["precision"] == "bf16"
    src, good, near = fuzzy_pairs(tiny_corpus().slice(600))
    auc = roc_auc_score(np.r_[np.ones(len(src)), np.zeros(len(src))], np.r_[scorer.score(src, good), scorer.score(src, near)])
    assert auc >= 0.9, auc


def test_scores_do_not_depend_on_batching_and_survive_a_reload(encoder_dir):
    t = tiny_corpus().slice(700, 50)
    src, tgt = t["src"].to_pylist(), t["tgt"].to_pylist()
    scorer = load_pair_scorer(encoder_dir)
    whole = scorer.score(src, tgt)
    np.testing.assert_allclose(scorer.score(src, tgt, batch_size=7), whole, atol=1e-4)
    np.testing.assert_allclose(load_pair_scorer(encoder_dir).score(src, tgt), whole, atol=1e-6)
    assert scorer.score([], []).shape == (0,)


def test_the_filter_says_which_pairs_the_classifier_reads_only_in_part(encoder_dir, caplog):
    from mtcore.alignment.filter import warn_cut_pairs

    t = tiny_corpus().slice(700, 20)
    src, tgt = t["src"].to_pylist(), t["tgt"].to_pylist()
    with caplog.at_level("WARNING", logger="mtcore.alignment.filter"):
        warn_cut_pairs(encoder_dir, src, tgt)
    assert not caplog.records  # short messages: read whole
    long = [s + (" " + s) * 60 for s in src[:3]]
    with caplog.at_level("WARNING", logger="mtcore.alignment.filter"):
        warn_cut_pairs(encoder_dir, long + src[3:], tgt)
    assert "3 of 20 pairs" in caplog.text and "first 64" in caplog.text


def test_training_reports_held_out_auc_against_each_kind_of_near_miss(encoder_dir, tmp_path):
    import shutil

    from mtcore.alignment.classifier import heldout_figures
    from mtcore.embedding.encoder import REFERENCE_FILE

    scorer = load_pair_scorer(encoder_dir)
    assert heldout_figures(scorer, encoder_dir) == {}  # no reference pairs: nothing to say
    enc = shutil.copytree(encoder_dir, tmp_path / "encoder")
    write_parquet(tiny_corpus().slice(600, 150), enc / REFERENCE_FILE)
    trained = heldout_figures(scorer, enc)
    untrained = heldout_figures(PairScorer(PairClassifier(scorer.model.cfg).eval(), scorer.tokenizer), enc)
    assert trained["heldout_pairs"] == 150 and {"heldout_auc_fuzzy", "heldout_auc_neighbour"} <= set(trained)
    assert trained["heldout_auc_fuzzy"] >= 0.85 and trained["heldout_auc"] > untrained["heldout_auc"] + 0.15, (trained, untrained)


def test_negatives_are_never_the_rows_own_target(tmp_path):
    from mtcore.nmt.tokenizer import train_tokenizer

    t = tiny_corpus().slice(0, 200)
    src, tgt, origins = t["src"].to_pylist(), t["tgt"].to_pylist(), t["origin"].to_pylist()
    tok = train_tokenizer(src + tgt, tmp_path / "spm.model", vocab_size=400)
    neg = build_negatives(src, tgt, origins, tok, ClassifierConfig(synthetic_rows=100))
    ids = tok.encode(tgt)
    rng = np.random.default_rng(0)
    for _ in range(5):
        idx = rng.permutation(len(src))[:64]
        drawn = draw_negatives(idx, neg, ids, rng)
        assert all(d != ids[i] for i, d in zip(idx, drawn))
    assert (neg.made_at >= 0).sum() > 50  # partial or swapped targets for most of the 100 rows


def test_a_classifier_belongs_to_its_encoders_pieces(encoder_dir, tmp_path):
    assert trained_for(encoder_dir)
    other = tiny_encoder(tmp_path, trained=False).save(tmp_path / "other")
    assert not trained_for(other)
    with pytest.raises(ClassifierError, match="--classifier-only"):
        ensure_classifier(other)  # not the built-in one: not trained behind the user's back
    import shutil

    shutil.copytree(classifier_dir(encoder_dir), classifier_dir(other))
    (other / "spm.model").write_bytes(Tokenizer(tmp_path / "spm.model").model_bytes() + b"\0")  # other pieces
    assert not trained_for(other)
    with pytest.raises(ClassifierError, match="another version"):
        ensure_classifier(other)


def test_the_stage_rejects_by_the_classifier_with_and_without_ray(encoder_dir, ray_local, tmp_path, mlflow_uri):
    from test_align_filter import _reference, corpus_with_misalignments

    table, bad = corpus_with_misalignments(start=700)
    cfg = FilterConfig(encoder=encoder_dir, score="classifier", batch_size=64, num_actors=2, reference=_reference(tmp_path))
    kept, rejects, threshold, scores, timing = filter_table(table, cfg, use_ray=False)
    rejected = set(rejects["id"].to_pylist())
    assert len(rejected & bad) / len(bad) >= 0.9 and len(rejected & bad) / max(1, len(rejected)) >= 0.8, (rejected, threshold)
    assert set(rejects["reason"].to_pylist()) == {"low_classifier"} and timing["classifier_seconds"] > 0
    assert len(scores.ref_classifier) == 100 and np.median(scores.mis_classifier) < np.median(scores.classifier)
    _, rejects_r, threshold_r, scores_r, _ = filter_table(table, cfg, use_ray=True)
    np.testing.assert_allclose(scores_r.classifier, scores.classifier, atol=1e-4)
    assert threshold_r == pytest.approx(threshold, abs=1e-4) and rejects_r["id"].to_pylist() == rejects["id"].to_pylist()

    result = filter_corpus(write_parquet(table, tmp_path / "in.parquet"), tmp_path / "out", cfg, use_ray=False)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["reconciled"] and report["score"] == "classifier" and report["calibration"]["method"].startswith("reference")
    assert "classifier" in pq.read_table(tmp_path / "out" / "scores.parquet").column_names
    assert not result.skipped and filter_corpus(tmp_path / "in.parquet", tmp_path / "out", cfg, use_ray=False).skipped
    train_beside_encoder(tiny_corpus().slice(0, 600), encoder_dir, ClassifierConfig(**(TINY | {"epochs": 2})))  # tracked
    import mlflow

    client = mlflow.MlflowClient(mlflow_uri)
    runs = client.search_runs([client.get_experiment_by_name("train_encoder").experiment_id],
                              "attributes.run_name = 'classifier-encoder'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert {"loss", "train_seconds", "train_pairs"} <= set(runs[0].data.metrics)
    with pytest.raises(Exception, match="other"):  # another classifier is another filter: not reused
        filter_corpus(tmp_path / "in.parquet", tmp_path / "out", cfg, use_ray=False)


def test_a_corpus_of_the_reverse_pair_is_scored_as_its_mirror(encoder_dir, tmp_path):
    """The classifier reads which side is the source (a length ratio, one attention per side): an en-vi one gave a
    vi-en corpus its sides the wrong way round. It now scores such a corpus as the en-vi mirror, rejects alike."""
    from mtcore.data.corpus import swap_sides
    from test_align_filter import _reference, corpus_with_misalignments

    table, bad = corpus_with_misalignments(start=700)
    ev = filter_table(table, FilterConfig(encoder=encoder_dir, score="classifier", reference=_reference(tmp_path)),
                      use_ray=False)
    mirror = write_parquet(swap_sides(pq.read_table(_reference(tmp_path))), tmp_path / "reference-vi-en.parquet")
    ve = filter_table(swap_sides(table), FilterConfig(encoder=encoder_dir, score="classifier", langs=("vi", "en"),
                                                      reference=str(mirror)), use_ray=False)
    np.testing.assert_allclose(ve[3].classifier, ev[3].classifier, atol=1e-5)
    assert ve[2] == pytest.approx(ev[2], abs=1e-5) and ve[1]["id"].to_pylist() == ev[1]["id"].to_pylist()


def test_the_classifier_needs_an_mtcore_encoder(tmp_path):
    from test_align_filter import corpus_with_misalignments

    table, _ = corpus_with_misalignments()
    with pytest.raises(FilterError, match="mtcore encoder"):
        filter_corpus(write_parquet(table, tmp_path / "in.parquet"), tmp_path / "out",
                      FilterConfig(encoder=str(tmp_path / "no-such-encoder"), score="classifier"), use_ray=False)


def test_the_main_job_filters_with_the_classifier_and_counts_its_contents(encoder_dir, tmp_path, ray_local):
    """`backtranslate.py --align-score classifier`: the align stage rejects by the classifier's score, and a
    retrained classifier makes that stage (not the cleaning) another one."""
    import shutil

    from mtcore.backtranslation import BTConfig
    from mtcore.backtranslation.pipeline import stage_align
    from mtcore.backtranslation.stages import StageDir

    corpus = write_parquet(tiny_corpus().slice(600, 200), tmp_path / "corpus.parquet")
    cfg = BTConfig(corpus=str(corpus), encoder=encoder_dir, align_score="classifier", output=str(tmp_path / "bt"))
    settings = cfg.stage_settings()
    report = stage_align(cfg, StageDir(tmp_path / "bt", "02_align_filter", settings["align_filter"]), corpus)
    assert report["input"] == 200 == report["kept"] + sum(report["rejected"].values())
    assert set(report["rejected"]) <= {"low_classifier"}
    scores = pq.read_table(tmp_path / "bt" / "02_align_filter" / "scores.parquet")
    assert "classifier" in scores.column_names

    own = tmp_path / "own" / "encoder"  # a copy whose classifier is then retrained
    shutil.copytree(encoder_dir, own)
    shutil.copytree(classifier_dir(encoder_dir), classifier_dir(own))
    mine = BTConfig(**{**cfg.__dict__, "encoder": str(own)})
    before = mine.stage_settings()
    config = classifier_dir(own) / "classifier.json"
    config.write_text(config.read_text() + "\n")
    after = mine.stage_settings()
    assert before["clean"] == after["clean"] and before["align_filter"] != after["align_filter"]
