"""Pair filtering: the Ray Data path equals the plain path; the stage's outputs reconcile; misalignments are caught."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mtcore.alignment.filter import FilterConfig, FilterError, calibrate, filter_corpus, filter_table, separation
from mtcore.data.corpus import write_parquet
from mtcore.data.ledger import REJECT_SCHEMA
from test_dual_xent import train_both_directions
from test_embedding import tiny_corpus, tiny_encoder


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A tiny trained encoder saved as a directory (actors load it by path)."""
    tmp = tmp_path_factory.mktemp("enc")
    enc = tiny_encoder(tmp, trained=True)
    return str(enc.save(tmp / "encoder"))


def corpus_with_misalignments(n_bad: int = 20, start: int = 600) -> tuple[pa.Table, set[str]]:
    """The tiny corpus' pairs from `start` (600: the 200 the encoder never saw), with `n_bad` targets rotated to wrong rows."""
    t = tiny_corpus().slice(start)
    tgt = t["tgt"].to_pylist()
    bad = list(range(0, 2 * n_bad, 2))
    rotated = [tgt[bad[(k + 1) % len(bad)]] for k in range(len(bad))]
    for i, v in zip(bad, rotated):
        tgt[i] = v
    ids = t["id"].to_pylist()
    return t.set_column(1, "tgt", pa.array(tgt)), {ids[i] for i in bad}


@pytest.mark.parametrize("score", ["cosine", "margin"])
def test_ray_data_path_equals_plain_path(encoder_dir, ray_local, score, tmp_path):
    table, _ = corpus_with_misalignments(start=700)
    cfg = FilterConfig(encoder=encoder_dir, score=score, batch_size=64, num_actors=2, reference=_reference(tmp_path))
    kept_r, rej_r, thr_r, scores_r, _ = filter_table(table, cfg, use_ray=True)
    kept_p, rej_p, thr_p, scores_p, _ = filter_table(table, cfg, use_ray=False)
    np.testing.assert_allclose(scores_r.cosine, scores_p.cosine, atol=1e-5)
    np.testing.assert_allclose(scores_r.margin, scores_p.margin, atol=1e-5)
    np.testing.assert_allclose(scores_r.reference(score), scores_p.reference(score), atol=1e-5)
    assert thr_r == pytest.approx(thr_p, abs=1e-5)
    assert kept_r["id"].to_pylist() == kept_p["id"].to_pylist()
    assert rej_r["id"].to_pylist() == rej_p["id"].to_pylist()


@pytest.mark.parametrize("calibration", ["random", "near_miss"])
@pytest.mark.parametrize("score", ["cosine", "margin"])
def test_auto_threshold_catches_misaligned_pairs(encoder_dir, score, calibration):
    table, bad = corpus_with_misalignments()
    kept, rejects, threshold, _, _ = filter_table(table, FilterConfig(encoder=encoder_dir, score=score, calibration=calibration), use_ray=False)
    rejected = set(rejects["id"].to_pylist())
    recall = len(rejected & bad) / len(bad)
    precision = len(rejected & bad) / max(1, len(rejected))
    assert recall >= 0.9 and precision >= 0.8, (recall, precision, threshold)


def test_stage_outputs_reconcile_and_skip(encoder_dir, tmp_path, mlflow_uri):
    table, _ = corpus_with_misalignments()
    src = write_parquet(table, tmp_path / "in" / "kept" / "part-0.parquet").parent  # a stage's kept/ dir as input
    out = tmp_path / "out"
    cfg = FilterConfig(encoder=encoder_dir, score="cosine", calibration="near_miss")
    result = filter_corpus(src, out, cfg, use_ray=False)
    report = json.loads((out / "report.json").read_text())
    assert report["reconciled"] and report["input"] == 200
    assert report["kept"] + report["rejected"].get("low_cosine", 0) == 200
    assert report["threshold"] == pytest.approx(result.threshold)
    rejects = pq.read_table(out / "rejects")
    assert rejects.schema.equals(REJECT_SCHEMA)
    assert set(rejects["reason"].to_pylist()) <= {"low_cosine"}
    assert all(s < result.threshold for s in rejects["score"].to_pylist())
    assert pq.read_table(out / "kept").num_rows == report["kept"]
    assert pq.read_table(out / "scores.parquet").num_rows == 200
    assert (out / "histogram.png").stat().st_size > 1000
    import mlflow

    cal = report["calibration"]  # issue 21: the noise share, the threshold and how it was chosen
    assert cal["method"].startswith("near_miss") and cal["threshold"] == pytest.approx(result.threshold)
    assert 0.0 <= cal["estimated_misaligned_share"] <= 0.5 and cal["max_false_reject"] == 0.02
    assert sum(cal["near_miss_pairs"].values()) > 200 and {"fuzzy", "neighbour"} <= set(cal["near_miss_pairs"])
    run = mlflow.MlflowClient(mlflow_uri).get_run(result.report["mlflow_run_id"])
    assert run.data.metrics["threshold"] == pytest.approx(result.threshold, abs=1e-6)
    assert run.data.metrics["calibration.estimated_misaligned_share"] == pytest.approx(cal["estimated_misaligned_share"])
    assert run.data.tags["calibration.method"] == cal["method"]
    # second run: skipped; --overwrite with a fixed threshold re-runs
    assert filter_corpus(src, out, cfg, use_ray=False, track=False).skipped
    again = filter_corpus(src, out, FilterConfig(encoder=encoder_dir, threshold=-1.0), use_ray=False, overwrite=True, track=False)
    assert not again.skipped and again.report["kept"] == 200
    from mtcore.runs import recorded_languages

    assert recorded_languages(out) == ("en", "vi")
    vi_en = FilterConfig(encoder=encoder_dir, threshold=-1.0, langs=("vi", "en"))  # recorded as a pair, not "('vi', 'en')"
    from mtcore.data.corpus import swap_sides

    vi_en_corpus = write_parquet(swap_sides(table), tmp_path / "vi-en-in.parquet")  # Vietnamese in src: read as vi-en
    filter_corpus(vi_en_corpus, tmp_path / "vi-en", vi_en, use_ray=False, overwrite=True, track=False)
    assert recorded_languages(tmp_path / "vi-en") == recorded_languages(tmp_path / "vi-en" / "kept") == ("vi", "en")
    # A stage folder as input counts by its kept/: files added beside it (clean --format tsv, plots) change nothing
    (tmp_path / "in" / "_stage.json").write_text("{}")
    filter_corpus(tmp_path / "in", tmp_path / "out2", cfg, use_ray=False, track=False)
    (tmp_path / "in" / "kept.tsv").write_text("a\tb\n")
    assert filter_corpus(tmp_path / "in", tmp_path / "out2", cfg, use_ray=False, track=False).skipped


def test_config_errors():
    with pytest.raises(FilterError, match="--score: one of"):
        FilterConfig(score="bleu")
    with pytest.raises(FilterError, match="--threshold: 'auto' or a number"):
        FilterConfig(threshold="high")
    with pytest.raises(FilterError, match="--calibration: one of"):
        FilterConfig(calibration="median")
    with pytest.raises(FilterError, match=r"--max-false-reject: 0.7 is out of range; pass a share of good pairs in \(0, 0.5\)"):
        FilterConfig(max_false_reject=0.7)
    with pytest.raises(FilterError, match="--threshold: nan is not a finite number"):
        FilterConfig(threshold="nan")
    with pytest.raises(FilterError, match="--reference, --max-false-reject choose\\(s\\) the threshold under --threshold auto"):
        FilterConfig(threshold=0.3, reference="ref.tsv", max_false_reject=0.01)
    with pytest.raises(FilterError, match="--max-false-reject is for --calibration reference or near_miss"):
        FilterConfig(calibration="random", max_false_reject=0.05)  # it was recorded in report.json as if applied
    with pytest.raises(Exception, match="--langs de: expected two language codes, source first"):
        FilterConfig(langs=("de",))


def test_a_looser_false_reject_budget_rejects_at_least_as_much(encoder_dir):
    table, bad = corpus_with_misalignments()
    strict = filter_table(table, FilterConfig(encoder=encoder_dir, score="cosine", calibration="near_miss", max_false_reject=0.01), use_ray=False)
    loose = filter_table(table, FilterConfig(encoder=encoder_dir, score="cosine", calibration="near_miss", max_false_reject=0.2), use_ray=False)
    assert loose[2] >= strict[2] and len(loose[1]) >= len(strict[1])
    old = filter_table(table, FilterConfig(encoder=encoder_dir, score="cosine", calibration="random"), use_ray=False)
    assert strict[2] >= old[2]  # the random-pair rule is the floor


def test_align_filter_cli(encoder_dir, tmp_path, capsys):
    table, _ = corpus_with_misalignments(start=700)
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in zip(table["src"].to_pylist(), table["tgt"].to_pylist())))
    argv = ["align_filter.py", "--input", str(tsv), "--output", str(tmp_path / "out"), "--encoder", encoder_dir, "--no-ray", "--no-mlflow",
            "--reference", _reference(tmp_path), "--max-false-reject", "0.03"]
    code = _run_script("pipelines/align_filter.py", argv)
    assert code == 0
    out, err = capsys.readouterr()
    assert "rejected: low_cosine" in out and "threshold" in out and "estimated noise share" in out
    assert "100 distinct pairs are too few for the margin" in err  # a 100-pair corpus is scored by cosine
    assert "(reference: 100 known-good pairs' scores as the good distribution" in out and "at most 0.03 of them (budget)" in out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["reconciled"] and report["calibration"]["max_false_reject"] == 0.03
    assert _run_script("pipelines/align_filter.py", argv) == 0
    assert "reusing " in capsys.readouterr().out
    bad = ["align_filter.py", "--input", str(tmp_path / "missing.tsv"), "--output", str(tmp_path / "o2"), "--encoder", encoder_dir]
    assert _run_script("pipelines/align_filter.py", bad) == 2
    assert "missing.tsv" in capsys.readouterr().err


def test_align_docs_cli(encoder_dir, tmp_path, capsys):
    src = ["Open the file", "Close the window", "Delete the new folder", "Print the page"]
    tgt = ["Mở tệp", "Đóng cửa sổ", "Xoá thư mục mới", "In trang"]
    (tmp_path / "d.en").write_text("\n".join(src) + "\n")
    (tmp_path / "d.vi").write_text("\n".join(tgt) + "\n")
    argv = ["align_docs.py", "--src", str(tmp_path / "d.en"), "--tgt", str(tmp_path / "d.vi"), "--output", str(tmp_path / "a.jsonl"), "--encoder", encoder_dir]
    assert _run_script("pipelines/align_docs.py", argv) == 0
    rows = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [(r["src"], r["tgt"]) for r in rows] == [([i], [i]) for i in range(4)]
    out = capsys.readouterr().out
    assert "1-1 4" in out and "(--split lines (auto))" in out  # how --split auto cut the files, said


def test_align_docs_indices_are_the_files_lines(encoder_dir, tmp_path, capsys):
    """One sentence a line with a blank line in the source: Vecalign's gold counts every line, so the
    output's indices are the files' line numbers, not the positions among non-blank lines."""
    (tmp_path / "d.en").write_text("Open the file\n\nClose the window\nDelete the new folder\nPrint the page\n")
    (tmp_path / "d.vi").write_text("Mở tệp\nĐóng cửa sổ\nXoá thư mục mới\nIn trang\n")
    argv = ["align_docs.py", "--src", str(tmp_path / "d.en"), "--tgt", str(tmp_path / "d.vi"), "--split", "lines",
            "--output", str(tmp_path / "a.vecalign"), "--encoder", encoder_dir]
    assert _run_script("pipelines/align_docs.py", argv) == 0
    lines = [line.rsplit(":", 1)[0] for line in (tmp_path / "a.vecalign").read_text().splitlines()]
    assert lines == ["[0]:[0]", "[2]:[1]", "[3]:[2]", "[4]:[3]"]
    assert "blank lines are in no block" in capsys.readouterr().out


def test_align_docs_cuts_both_documents_the_same_way(tmp_path):
    from mtcore.alignment.documents import resolve_split

    wrapped, flat = tmp_path / "wrapped.en", tmp_path / "flat.vi"
    wrapped.write_text("A wrapped\nsentence. And one more.\n\nNext paragraph.\n")
    flat.write_text("".join(f"Câu {i}.\n" for i in range(40)))
    assert resolve_split([wrapped, flat]) == resolve_split([flat, wrapped]) == "lines"  # 1 blank line of 44
    assert resolve_split([wrapped, wrapped]) == "sentences"
    assert resolve_split([wrapped, flat], "sentences") == "sentences"


def test_align_docs_paragraph_file_against_a_sentence_file(tmp_path):
    """A paragraph a line against a sentence a line: pooled, the sentence file outvoted it and 40 % of the guide's
    source was deleted; now both are cut into sentences."""
    from mtcore.alignment.documents import resolve_split

    per_line = tmp_path / "lines.en"
    per_line.write_text("".join(f"Sentence number {i} is here.\n" for i in range(50)))
    paragraphs = tmp_path / "paras.vi"
    paragraphs.write_text("".join(f"Câu {i} ở đây. Câu {i + 1} cũng vậy. Và câu {i + 2}.\n" for i in range(0, 50, 3)))
    assert resolve_split([per_line, paragraphs]) == resolve_split([paragraphs, per_line]) == "paragraphs"
    assert resolve_split([per_line, per_line]) == "lines"


def test_align_docs_refuses_bad_outputs_before_work(tmp_path, capsys, monkeypatch):
    (tmp_path / "d.en").write_text("Open the file\n")
    (tmp_path / "d.vi").write_text("Mở tệp\n")
    (tmp_path / "a_file").write_text("x")
    base = ["align_docs.py", "--src", str(tmp_path / "d.en"), "--tgt", str(tmp_path / "d.vi"), "--encoder", str(tmp_path / "no-encoder")]
    for output, extra, said in (("out.txt", [], ".jsonl, .tsv or .vecalign"),
                                ("out.vecalign", ["--split", "sentences"], "needs --split lines"),
                                ("a_file/out.jsonl", [], "a_file")):
        assert _run_script("pipelines/align_docs.py", [*base, "--output", str(tmp_path / output), *extra]) == 2
        err = capsys.readouterr().err
        assert said in err and "encoder" not in err, err  # refused before the encoder is even looked at
    from mtcore.cli.align_docs import default_output

    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "ws"))
    assert default_output(str(tmp_path / "guide.en.txt")) == tmp_path / "ws" / "align_docs" / "guide.jsonl"  # named by --src


def test_align_docs_warns_when_most_sentences_have_no_counterpart(caplog):
    from mtcore.alignment.documents import Block
    from mtcore.cli.align_docs import warn_unaligned

    mostly_deleted = [Block((0,), (0,), 0.1)] + [Block((i,), (), 0.2) for i in range(1, 4)] + [Block((), (j,), 0.2) for j in range(1, 3)]
    warn_unaligned(mostly_deleted, 4, 3, "lines")
    assert "75 % of the source and 67 % of the target sentences have no counterpart" in caplog.text
    caplog.clear()
    warn_unaligned([Block((i,), (i,), 0.1) for i in range(3)] + [Block((3,), (), 0.2)], 4, 3, "lines")
    assert not caplog.text


def test_align_docs_cli_one_sentence_documents(encoder_dir, tmp_path, capsys):
    """A one-sentence pair is aligned 1-1 (it was deleted on both sides), with the default background or the user's."""
    (tmp_path / "d.en").write_text("Open the file\n")
    (tmp_path / "d.vi").write_text("Mở tệp\n")
    (tmp_path / "bg.en").write_text("Close the window\nPrint the page\nDelete the new folder\nSave the image\n")
    (tmp_path / "bg.vi").write_text("Đóng cửa sổ\nIn trang\nXoá thư mục mới\nLưu ảnh\n")
    base = ["align_docs.py", "--src", str(tmp_path / "d.en"), "--tgt", str(tmp_path / "d.vi"), "--encoder", encoder_dir]
    for extra in ([], ["--background", str(tmp_path / "bg.en"), str(tmp_path / "bg.vi")]):
        assert _run_script("pipelines/align_docs.py", [*base, "--output", str(tmp_path / "a.jsonl"), *extra]) == 0
        rows = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
        assert [(r["src"], r["tgt"]) for r in rows] == [([0], [0])]
    missing = [*base, "--output", str(tmp_path / "b.jsonl"), "--background", str(tmp_path / "nope.en"), str(tmp_path / "bg.vi")]
    assert _run_script("pipelines/align_docs.py", missing) == 2
    assert "nope.en" in capsys.readouterr().err


def _run_script(path: str, argv: list[str]) -> int:
    """Run a pipelines/ script's main() in process (as `python path argv…` would)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(Path(path).stem, root / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv[1:])


def test_filter_stage_reuses_or_refuses(encoder_dir, tmp_path):
    """Same settings, corpus and encoder: reused. Another threshold or an edited corpus: refused."""
    from mtcore.runs import StageError

    table, _ = corpus_with_misalignments()
    corpus = write_parquet(table, tmp_path / "corpus.parquet")
    out = tmp_path / "align"
    cfg = FilterConfig(encoder=encoder_dir, score="cosine")
    first = filter_corpus(corpus, out, cfg, use_ray=False, track=False)
    assert not first.skipped
    assert filter_corpus(corpus, out, cfg, use_ray=False, track=False).skipped
    with pytest.raises(StageError, match="setting `threshold`"):
        filter_corpus(corpus, out, FilterConfig(encoder=encoder_dir, score="cosine", threshold=0.5), use_ray=False, track=False)
    write_parquet(table.slice(0, 100), corpus)
    with pytest.raises(StageError, match="input `corpus` .*its contents changed"):
        filter_corpus(corpus, out, cfg, use_ray=False, track=False)
    assert json.loads((out / "report.json").read_text())["input"] == len(table)  # the old output stands whole
    assert filter_corpus(corpus, out, cfg, use_ray=False, track=False, overwrite=True).report["input"] == 100


# --------------------------------------------------------------------------- dual conditional cross-entropy


@pytest.fixture(scope="module")
def nmt_dirs(tmp_path_factory):
    """Tiny en→vi and vi→en models trained on the tiny corpus's first 600 pairs (the filter sees the last 200)."""
    t = tiny_corpus().slice(0, 600)
    models = train_both_directions(list(zip(t["src"].to_pylist(), t["tgt"].to_pylist())), tmp_path_factory.mktemp("nmt"))
    return str(models["forward"].path), str(models["reverse"].path)


def test_dual_xent_catches_misaligned_pairs_the_same_with_and_without_ray(encoder_dir, nmt_dirs, ray_local, tmp_path):
    table, bad = corpus_with_misalignments(start=700)
    cfg = FilterConfig(encoder=encoder_dir, score="dual_xent", nmt_forward=nmt_dirs[0], nmt_reverse=nmt_dirs[1],
                       batch_size=64, num_actors=2, reference=_reference(tmp_path))
    kept, rejects, threshold, scores, timing = filter_table(table, cfg, use_ray=False)
    rejected = set(rejects["id"].to_pylist())
    assert len(rejected & bad) / len(bad) >= 0.9 and len(rejected & bad) / max(1, len(rejected)) >= 0.8, (rejected, threshold)
    assert set(rejects["reason"].to_pylist()) == {"low_dual_xent"} and timing["dual_xent_seconds"] > 0
    assert len(scores.dual_xent) == len(scores.mis_dual_xent) == 100 and np.median(scores.mis_dual_xent) < np.median(scores.dual_xent)
    assert len(scores.ref_dual_xent) == 100 and calibrate(scores, cfg)["method"].startswith("reference")  # the reference, scored too
    _, rejects_r, threshold_r, scores_r, _ = filter_table(table, cfg, use_ray=True)
    np.testing.assert_allclose(scores_r.dual_xent, scores.dual_xent, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(scores_r.ref_dual_xent, scores.ref_dual_xent, rtol=1e-4, atol=1e-5)
    assert threshold_r == pytest.approx(threshold, abs=1e-4) and rejects_r["id"].to_pylist() == rejects["id"].to_pylist()


def test_dual_xent_near_miss_calibration_scores_the_near_misses_and_the_stage_keeps_them(encoder_dir, nmt_dirs, tmp_path, mlflow_uri):
    table, _ = corpus_with_misalignments()
    cfg = FilterConfig(encoder=encoder_dir, score="dual_xent", nmt_forward=nmt_dirs[0], nmt_reverse=nmt_dirs[1],
                       calibration="near_miss")
    result = filter_corpus(write_parquet(table, tmp_path / "in.parquet"), tmp_path / "out", cfg, use_ray=False)
    report = result.report
    assert report["reconciled"] and report["kept"] + report["rejected"].get("low_dual_xent", 0) == 200
    assert report["calibration"]["near_miss_pairs"].keys() >= {"fuzzy", "neighbour"}
    assert report["calibration"]["near_miss_median"] < report["calibration"]["real_median"]
    written = pq.read_table(tmp_path / "out" / "scores.parquet")
    assert "dual_xent" in written.column_names and written.num_rows == 200


def test_dual_xent_needs_two_models_of_opposite_directions(nmt_dirs):
    with pytest.raises(FilterError, match="--nmt FORWARD REVERSE"):
        FilterConfig(score="dual_xent")
    with pytest.raises(ValueError, match="two opposite directions"):
        FilterConfig(score="dual_xent", nmt_forward=nmt_dirs[0], nmt_reverse=nmt_dirs[0])


def _reference(tmp_path) -> str:
    """Known-good pairs for calibration "reference": 100 tiny-corpus pairs the encoder never saw (as the
    built-in encoder's held-out catalogs); the corpora of these tests are the 100 after them."""
    return str(write_parquet(tiny_corpus().slice(600, 100), tmp_path / "reference.parquet"))


@pytest.mark.parametrize("n_bad", [0, 10, 40])
def test_reference_calibration_follows_the_noise_share(encoder_dir, tmp_path, n_bad):
    """Calibrated on known-good pairs, the filter removes the noise whatever its share (0, 10 or 40 %), loses few
    good pairs, and reports a noise share that grows with it."""
    table, bad = corpus_with_misalignments(n_bad, start=700)
    cfg = FilterConfig(encoder=encoder_dir, score="margin", reference=_reference(tmp_path))
    kept, rejects, threshold, scores, _ = filter_table(table, cfg, use_ray=False)
    rejected = set(rejects["id"].to_pylist())
    assert not bad or len(rejected & bad) / len(bad) >= 0.9
    assert len(rejected - bad) / (len(table) - len(bad)) <= 0.05  # good pairs lost
    cal = calibrate(scores, cfg)
    assert cal["method"].startswith("reference") and cal["reference_pairs"] == 100
    assert cal["estimated_false_reject"] == pytest.approx((scores.ref_margin < cal["threshold"]).mean(), abs=1e-4)
    assert 0.5 * n_bad / len(table) <= cal["estimated_misaligned_share"] <= 1.2 * n_bad / len(table) + 0.02


def test_reference_calibration_without_reference_pairs_uses_near_misses(encoder_dir, caplog):
    from mtcore.alignment.filter import reference_pairs

    with caplog.at_level("WARNING", logger="mtcore.alignment.filter"):  # a rule the user chose is said to go unused
        assert reference_pairs(FilterConfig(encoder=encoder_dir, reference_rule="fewest_errors"), encoder_dir) == (None, "")
    assert "--reference-rule fewest_errors is not used (it needs known-good pairs: pass --reference FILE)" in caplog.text
    table, _ = corpus_with_misalignments()
    cfg = FilterConfig(encoder=encoder_dir, score="cosine")  # a bare encoder directory: no reference.parquet
    assert cfg.calibration == "reference"
    scores = filter_table(table, cfg, use_ray=False)[3]
    cal = calibrate(scores, cfg)
    assert cal["method"].startswith("near_miss (no reference pairs)") and sum(cal["near_miss_pairs"].values()) > 0
    # what tells a weak encoder (it rejected half of a clean corpus in silence) from a fit one, in report.json
    assert cal["corpus_vs_random_auc"] == pytest.approx(separation(scores.real("cosine"), scores.misaligned("cosine")), abs=1e-4)
    assert cal["corpus_vs_random_auc"] > 0.75


def test_reference_errors(tmp_path):
    with pytest.raises(FilterError, match="missing.parquet: file not found"):
        FilterConfig(reference=str(tmp_path / "missing.parquet"))
    for lang in ("de", "fr"):  # a Moses prefix of the corpus's languages: it was "not found" for want of .en/.vi
        (tmp_path / f"ep.{lang}").write_text("x\n", encoding="utf-8")
    assert FilterConfig(reference=str(tmp_path / "ep"), langs=("de", "fr")).reference
    with pytest.raises(FilterError, match=r"--reference .*ep: file not found \(nor ep.en \+ ep.vi\)"):
        FilterConfig(reference=str(tmp_path / "ep"))
    with pytest.raises(FilterError, match="--reference is for --calibration reference"):
        FilterConfig(reference=_reference(tmp_path), calibration="random")


def test_a_moses_prefix_reference_is_read_as_the_parquet_one(encoder_dir, tmp_path):
    """`--reference PREFIX` (PREFIX.en + PREFIX.vi, as for --input) calibrates exactly like the same pairs as Parquet."""
    pairs = tiny_corpus().slice(600, 100)
    prefix = tmp_path / "ref"
    for lang, col in (("en", "src"), ("vi", "tgt")):
        (tmp_path / f"ref.{lang}").write_text("".join(t + "\n" for t in pairs[col].to_pylist()), encoding="utf-8")
    table = corpus_with_misalignments(10, start=700)[0]
    cal_text = calibrate(filter_table(table, cfg_text := FilterConfig(encoder=encoder_dir, reference=str(prefix)), use_ray=False)[3], cfg_text)
    cal_parquet = calibrate(filter_table(table, cfg_pq := FilterConfig(encoder=encoder_dir, reference=_reference(tmp_path)), use_ray=False)[3], cfg_pq)
    assert cal_text["method"].startswith("reference") and cal_text["reference_pairs"] == 100
    assert cal_text["threshold"] == pytest.approx(cal_parquet["threshold"])


def test_reference_pairs_inside_the_corpus_keep_their_rows_scores(encoder_dir, tmp_path):
    """Filtering the corpus the reference came from (the main job does): a reference pair that is a corpus row
    has exactly that row's scores, not those of a copy beside itself."""
    table = corpus_with_misalignments(0, start=600)[0]  # includes the reference's 100 pairs
    cfg = FilterConfig(encoder=encoder_dir, score="margin", reference=_reference(tmp_path))
    scores = filter_table(table, cfg, use_ray=False)[3]
    np.testing.assert_allclose(scores.ref_margin, scores.margin[:100])
    np.testing.assert_allclose(scores.ref_cosine, scores.cosine[:100])


def test_an_encoder_with_too_few_reference_pairs_falls_back_to_near_misses(encoder_dir, tmp_path):
    import shutil

    enc = shutil.copytree(encoder_dir, tmp_path / "enc")
    write_parquet(tiny_corpus().slice(600, 10), enc / "reference.parquet")  # a tiny training corpus leaves few
    cfg = FilterConfig(encoder=str(enc), score="cosine")
    cal = calibrate(filter_table(corpus_with_misalignments(start=700)[0], cfg, use_ray=False)[3], cfg)
    assert cal["method"].startswith("near_miss (no reference pairs)")
    with pytest.raises(FilterError, match="10 reference pairs; at least 50 are needed"):
        filter_table(corpus_with_misalignments(start=700)[0], FilterConfig(encoder=str(enc), reference=str(enc / "reference.parquet")), use_ray=False)


def test_reference_pairs_are_scored_as_rows_of_the_corpus():
    """A reference pair's margin is the one it would have as one more row of the corpus, whatever the corpus's
    size (the margin's scale grows as a corpus gets smaller)."""
    from mtcore.alignment.filter import reference_scores, score_pairs

    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 16)).astype(np.float32)
    y = (x + 0.5 * rng.normal(size=x.shape)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    whole = score_pairs(x, y, None, k=4)
    cos, margin = reference_scores(x[:-5], y[:-5], x[-5:], y[-5:], k=4)
    full = [score_pairs(np.vstack([x[:-5], x[i:i + 1]]), np.vstack([y[:-5], y[i:i + 1]]), None, k=4).margin[-1] for i in range(55, 60)]
    np.testing.assert_allclose(margin, full, rtol=1e-5)
    np.testing.assert_allclose(cos, whole.cosine[-5:], rtol=1e-5)
    sampled = reference_scores(x[:-5], y[:-5], x[-5:], y[-5:], k=4, window=20)[1]  # neighbours from 20 of the 55 rows
    assert sampled.shape == (5,) and np.all(np.isfinite(sampled))


def test_other_reference_pairs_are_another_stage(encoder_dir, tmp_path):
    """The stage fingerprint covers the reference file's contents, not only its path."""
    from mtcore.runs import StageError

    src = write_parquet(corpus_with_misalignments(start=700)[0], tmp_path / "in.parquet")
    ref = _reference(tmp_path)
    cfg = FilterConfig(encoder=encoder_dir, reference=ref)
    assert not filter_corpus(src, tmp_path / "out", cfg, use_ray=False, track=False).skipped
    assert filter_corpus(src, tmp_path / "out", cfg, use_ray=False, track=False).skipped
    write_parquet(tiny_corpus().slice(620, 80), ref)  # the same path, other pairs
    with pytest.raises(StageError, match="reference"):
        filter_corpus(src, tmp_path / "out", cfg, use_ray=False, track=False)


def test_the_encoders_own_reference_named_is_the_default_stage(encoder_dir, tmp_path):
    """`--reference ENCODER/reference.parquet` is what the filter reads without it: the same stage, reused (it was
    refused as another input)."""
    import shutil

    encoder = shutil.copytree(encoder_dir, tmp_path / "encoder")
    shutil.copy(_reference(tmp_path), encoder / "reference.parquet")
    src = write_parquet(corpus_with_misalignments(start=700)[0], tmp_path / "in.parquet")
    assert not filter_corpus(src, tmp_path / "out", FilterConfig(encoder=str(encoder)), use_ray=False, track=False).skipped
    named = FilterConfig(encoder=str(encoder), reference=str(encoder / "reference.parquet"))
    assert filter_corpus(src, tmp_path / "out", named, use_ray=False, track=False).skipped


def test_pairs_with_an_empty_side_are_rejects_with_their_reason(encoder_dir, tmp_path):
    """Two empty sides encode alike (cosine 1.0) and were kept; one empty side could pass the threshold."""
    table, _ = corpus_with_misalignments(n_bad=5)
    src, tgt = table["src"].to_pylist(), table["tgt"].to_pylist()
    src[3], tgt[5], src[7], tgt[7] = "", "  ", "", ""
    table = table.set_column(0, "src", pa.array(src)).set_column(1, "tgt", pa.array(tgt))
    out = tmp_path / "out"
    result = filter_corpus(write_parquet(table, tmp_path / "in.parquet"), out, FilterConfig(encoder=encoder_dir),
                           use_ray=False, track=False)
    report = json.loads((out / "report.json").read_text())
    assert report["rejected"]["empty_side"] == 3 and report["reconciled"] and report["input"] == 200
    rejects = pq.read_table(out / "rejects").to_pylist()
    empty = {r["id"]: r["detail"] for r in rejects if r["reason"] == "empty_side"}
    ids = table["id"].to_pylist()
    assert empty == {ids[3]: "empty source", ids[5]: "empty target", ids[7]: "both sides empty"}
    assert not set(empty) & set(result.kept["id"].to_pylist())
    assert pq.read_table(out / "scores.parquet").num_rows == 197  # the scored pairs


def test_a_stage_folder_as_reference_counts_by_its_kept_pairs(encoder_dir, tmp_path):
    """`--reference runs/x`: a text export added to that folder changed nothing, yet the stage was refused."""
    src = write_parquet(corpus_with_misalignments(start=700)[0], tmp_path / "in.parquet")
    ref_stage = tmp_path / "ref_stage"
    write_parquet(tiny_corpus().slice(600, 100), ref_stage / "kept" / "part-0.parquet")
    (ref_stage / "_stage.json").write_text("{}")
    cfg = FilterConfig(encoder=encoder_dir, reference=str(ref_stage))
    assert not filter_corpus(src, tmp_path / "out", cfg, use_ray=False, track=False).skipped
    (ref_stage / "kept.tsv").write_text("a\tb\n")
    assert filter_corpus(src, tmp_path / "out", cfg, use_ray=False, track=False).skipped


def test_a_score_that_cannot_tell_good_pairs_from_random_ones_gets_no_floor(tmp_path, caplog):
    """An untrained encoder scores random pairs as true ones. Its random-pair rule's threshold was an arbitrary
    crossing of two like distributions, and as the floor it rejected a large share of a good corpus (a review
    measured 81 % with an untrained classifier). Now the floor is off, at most --max-false-reject of the known-good
    pairs are rejected, and a warning says the score is not fit to filter."""
    untrained = str(tiny_encoder(tmp_path, trained=False).save(tmp_path / "untrained"))
    src = write_parquet(corpus_with_misalignments(start=700)[0], tmp_path / "in.parquet")
    cfg = FilterConfig(encoder=untrained, reference=_reference(tmp_path))
    with caplog.at_level("WARNING", logger="mtcore.alignment.filter"):
        result = filter_corpus(src, tmp_path / "out", cfg, use_ray=False, track=False)
    cal = result.report["calibration"]
    assert cal["reference_vs_random_auc"] < 0.75 and "(floor)" not in cal["method"]
    assert cal["threshold_random_rule"] is None and cal["estimated_false_reject"] <= 0.02
    assert "does not tell the known-good pairs from random ones" in caplog.text


def test_the_random_pair_floor_applies_where_the_score_separates_and_is_said_when_above_the_budget():
    from mtcore.alignment.calibration import reference_threshold, separation

    rng = np.random.default_rng(0)
    same = [rng.normal(size=2000) for _ in range(3)]  # corpus, random pairs, reference: one distribution
    for seed in range(5):
        real, mis, ref = (np.random.default_rng(seed * 3 + i).normal(size=2000) for i in range(3))
        t, _, est_fr, t_random = reference_threshold(real, mis, ref)
        assert t_random == -np.inf and (real < t).mean() < 0.05 and est_fr <= 0.02  # was 11–95 % of the corpus
    assert abs(separation(same[2], same[1]) - 0.5) < 0.05
    good, bad = rng.normal(1.0, 1.0, 2000), rng.normal(-1.0, 1.0, 2000)  # AUC about 0.92: the floor holds
    real = np.concatenate([good[:1800], bad[:200]])
    t, _, est_fr, t_random = reference_threshold(real, bad[200:], good[1800:], max_false_reject=0.0001)
    assert separation(good, bad) > 0.75 and t == t_random and est_fr > 0.0001


def test_the_budget_rule_spends_the_false_reject_budget_where_fewest_errors_keeps_overlapping_noise():
    """Near misses that overlap the good pairs (real noise: AUC about 0.8) are all kept by the fewest-errors rule;
    the budget rule rejects below the known-good pairs' 2 % quantile, and loses about 2 % of unseen good pairs."""
    from mtcore.alignment.calibration import reference_threshold

    rng = np.random.default_rng(1)
    good, near, mis = rng.normal(1.0, 0.5, 30_000), rng.normal(0.5, 0.5, 1_500), rng.normal(-2.0, 0.5, 3_000)
    real, ref, unseen = np.concatenate([good[:12_000], near]), good[12_000:16_000], good[16_000:]
    t_few = reference_threshold(real, mis, ref, 0.02, rule="fewest_errors")[0]
    t_bud, share, est_fr, _ = reference_threshold(real, mis, ref, 0.02, rule="budget")
    assert (ref < t_bud).mean() <= 0.02 < (ref <= t_bud).mean() + 1e-9  # the highest threshold within the budget
    assert est_fr == pytest.approx((ref < t_bud).mean())
    assert 0.01 <= (unseen < t_bud).mean() <= 0.03
    caught_few, caught_bud = (near < t_few).mean(), (near < t_bud).mean()
    assert caught_bud > 2 * caught_few and caught_bud > 0.1  # measured: 0.15 vs 0.05
    assert 0.0 < share < 1_500 / len(real)  # a lower bound on the noise share
    with pytest.raises(ValueError, match="reference rule: one of"):
        reference_threshold(real, mis, ref, 0.02, rule="quantile")


def test_length_bands_count_the_sources_words():
    from mtcore.alignment.calibration import BAND_NAMES, length_bands

    assert length_bands(["Save", "Save as", "Save the file", "Save the new file now", ""]).tolist() == [0, 1, 1, 2, 0]
    assert len(BAND_NAMES) == 3 and length_bands(["保存文件", "打开新文件"]).tolist() == [0, 0]  # no spaces: one band


def test_the_budget_is_spent_in_every_length_band():
    """One-word labels score low and spread, longer messages high and tight; real near misses (outdated translations)
    sit among the longer ones. One pooled threshold spent the budget on the labels and caught none of them; a
    threshold per length band loses about the budget in each band and catches most of them."""
    from mtcore.alignment.calibration import length_band_thresholds, reference_threshold

    rng = np.random.default_rng(0)

    def good(n_short: int, n_long: int) -> tuple[np.ndarray, np.ndarray]:
        return (np.r_[rng.normal(0.3, 0.15, n_short), rng.normal(0.8, 0.05, n_long)],
                np.r_[np.zeros(n_short, np.int64), np.full(n_long, 2)])

    ref, ref_band = good(1000, 3000)
    real_good, band_good = good(1000, 3000)
    real, band = np.r_[real_good, rng.normal(0.68, 0.04, 400)], np.r_[band_good, np.full(400, 2)]
    bad = np.r_[np.zeros(4000, bool), np.ones(400, bool)]
    mis = rng.normal(-0.5, 0.1, len(real))
    pooled = reference_threshold(real, mis, ref, 0.02, rule="budget")[0]
    by, share, est_fr, _ = length_band_thresholds(real, mis, ref, band, ref_band, None, 0.02)
    rej_pooled, rej_band = real < pooled, real < by[band]
    assert rej_pooled[~bad & (band == 0)].mean() > 0.05 and rej_pooled[bad].mean() < 0.05
    for b in (0, 2):
        assert rej_band[~bad & (band == b)].mean() <= 0.035
    assert rej_band[bad].mean() > 0.5
    assert by[1] == pytest.approx(np.quantile(ref, 0.02))  # a band without reference pairs: the pooled quantile
    assert est_fr == pytest.approx((ref < by[ref_band]).mean()) and 0.0 < share < 0.2


def test_a_band_quantile_is_taken_low_where_the_reference_catalogs_disagree():
    from mtcore.alignment.calibration import catalog_quantile

    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(mean, 0.1, 50) for mean in rng.normal(0.0, 1.0, 40)])  # 40 catalogs of 50
    groups = np.repeat([f"cat{i}" for i in range(40)], 50)
    assert catalog_quantile(values, None, 0.02) == pytest.approx(np.quantile(values, 0.02))
    assert catalog_quantile(values, np.full(len(values), "one"), 0.02) == pytest.approx(np.quantile(values, 0.02))
    assert catalog_quantile(values, groups, 0.02) < np.quantile(values, 0.02) - 0.1
    alike = rng.normal(0.0, 1.0, 2000)  # catalogs that do not differ: about the plain quantile
    assert abs(catalog_quantile(alike, groups, 0.02) - np.quantile(alike, 0.02)) < 0.15


def test_a_reference_pair_is_scored_beside_its_own_catalog():
    """A catalog's messages are one another's nearest neighbours ("Cannot open file" beside "Cannot read file"), which
    lowers their margin as rows of a corpus; scored beside the corpus alone, reference pairs of such a catalog had
    higher margins than the same pairs in a corpus, and the reference's quantile rejected too many good pairs."""
    from mtcore.alignment.filter import reference_scores, score_pairs

    rng = np.random.default_rng(0)

    def unit(a: np.ndarray) -> np.ndarray:
        return (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)

    x = unit(rng.normal(size=(300, 16)))
    y = unit(x + 0.5 * rng.normal(size=x.shape))
    base = rng.normal(size=16)
    xc = unit(base + 0.4 * rng.normal(size=(20, 16)))  # a catalog of near-duplicate messages
    yc = unit(xc + 0.3 * rng.normal(size=xc.shape))
    in_corpus = score_pairs(np.vstack([x[:280], xc]), np.vstack([y[:280], yc]), None, k=4).margin[280:]
    alone = reference_scores(x, y, xc, yc, k=4)[1]
    beside = reference_scores(x, y, xc, yc, k=4, groups=np.array(["c"] * 20, dtype=object))[1]
    assert np.abs(beside - in_corpus).mean() < 0.5 * np.abs(alone - in_corpus).mean()
    assert np.median(beside) < np.median(alone)


def test_the_encoders_reference_sets_a_threshold_per_length_band(encoder_dir, tmp_path, mlflow_uri):
    """With enough known-good pairs per band, every band has its threshold: reported (report.json, MLflow), named in
    each reject, and the one each pair is judged by (scores.parquet's `kept`)."""
    import shutil

    import mlflow

    from mtcore.alignment.calibration import BAND_NAMES

    encoder = shutil.copytree(encoder_dir, tmp_path / "encoder")
    write_parquet(tiny_corpus().slice(200, 400), encoder / "reference.parquet")  # 4 catalogs; 3- and 4-word messages
    src = write_parquet(corpus_with_misalignments(20, start=600)[0], tmp_path / "in.parquet")
    res = filter_corpus(src, tmp_path / "out", FilterConfig(encoder=str(encoder)), use_ray=False)
    cal = res.report["calibration"]
    metrics = mlflow.MlflowClient(mlflow_uri).get_run(res.report["mlflow_run_id"]).data.metrics
    assert metrics["threshold.4_or_more_words"] == pytest.approx(cal["thresholds_by_length"]["4+ words"])
    by = cal["thresholds_by_length"]
    assert list(by) == list(BAND_NAMES) and cal["threshold"] == pytest.approx(min(by.values()))
    assert cal["reference_pairs_by_length"]["2-3 words"] >= 100 and cal["reference_pairs_by_length"]["4+ words"] >= 100
    assert by["2-3 words"] != by["4+ words"] and "in each band of source length" in cal["method"]
    scores = pq.read_table(tmp_path / "out" / "scores.parquet").to_pandas()
    table = pq.read_table(src).to_pandas().set_index("id").loc[scores["id"]]
    words = table["src"].str.split().str.len().to_numpy()
    expected = scores["margin"].to_numpy() >= np.where(words >= 4, by["4+ words"], by["2-3 words"])
    assert (scores["kept"].to_numpy() == expected).all()
    rejects = pq.read_table(tmp_path / "out" / "rejects").to_pandas()
    assert len(rejects) == (~expected).sum() and all(d.endswith(("(2-3 words)", "(4+ words)")) for d in rejects["detail"])


def test_reference_rule_is_checked_and_reported(encoder_dir, tmp_path, monkeypatch):
    from mtcore.alignment import filter as filter_module

    computed = []  # (rule, threshold) of each reference_threshold call: the threshold reported is the rule's

    def recording(*args, **kwargs):
        out = real_rule(*args, **kwargs)
        computed.append((args[4] if len(args) > 4 else kwargs.get("rule", "budget"), out[0]))
        return out

    real_rule = filter_module.reference_threshold
    monkeypatch.setattr(filter_module, "reference_threshold", recording)
    with pytest.raises(FilterError, match=r"--reference-rule: one of \['budget', 'budget_pooled', 'fewest_errors'\], not 'median'"):
        FilterConfig(reference_rule="median")
    with pytest.raises(FilterError, match="--reference-rule choose"):
        FilterConfig(threshold=0.5, reference_rule="fewest_errors")
    with pytest.raises(FilterError, match="--reference-rule is for --calibration reference; with 'near_miss' it would be ignored"):
        FilterConfig(calibration="near_miss", reference_rule="fewest_errors")
    table, _ = corpus_with_misalignments(10, start=700)
    for rule in ("budget", "fewest_errors"):
        cfg = FilterConfig(encoder=encoder_dir, score="margin", reference=_reference(tmp_path), reference_rule=rule)
        cal = calibrate(filter_table(table, cfg, use_ray=False)[3], cfg)
        assert cal["reference_rule"] == rule and f"({rule})" in cal["method"]
        assert computed[-1] == (rule, pytest.approx(cal["threshold"], abs=1e-6))
    cfg = FilterConfig(encoder=encoder_dir, score="margin", calibration="random")
    assert calibrate(filter_table(table, cfg, use_ray=False)[3], cfg)["reference_rule"] is None


def test_copies_of_a_good_pair_share_its_score_and_are_kept(encoder_dir, tmp_path):
    """50 copies of one pair were each other's nearest neighbours: margin 1.0, all rejected as misaligned."""
    table = tiny_corpus().slice(700)
    copies = table.slice(0, 1)
    with_copies = pa.concat_tables([table] + [copies] * 50)
    with_copies = with_copies.set_column(with_copies.schema.get_field_index("id"), "id",
                                         pa.array([f"row{i}" for i in range(len(with_copies))]))
    cfg = FilterConfig(encoder=encoder_dir, reference=_reference(tmp_path))
    kept, rejects, _, scores, _ = filter_table(with_copies, cfg, use_ray=False)
    alone = filter_table(table, cfg, use_ray=False)[3]
    assert len(kept) + len(rejects) == len(with_copies) and len(scores.margin) == len(with_copies)
    assert np.allclose(scores.margin[len(table):], alone.margin[0]) and np.allclose(scores.margin[: len(table)], alone.margin)
    assert not set(rejects["id"].to_pylist()) & {f"row{i}" for i in range(len(table), len(with_copies))}


def test_reference_pairs_with_an_empty_side_are_left_out(encoder_dir, tmp_path, caplog):
    """They counted as known-good: 40 empty targets moved the threshold from 0.956 to 0.552 in a review."""
    ref = tiny_corpus().slice(600, 100)
    blank = ref.slice(0, 40).set_column(1, "tgt", pa.array([""] * 40))
    with_blank = write_parquet(pa.concat_tables([ref, blank]), tmp_path / "ref_blank.parquet")
    table, _ = corpus_with_misalignments(start=700)
    plain = filter_table(table, FilterConfig(encoder=encoder_dir, reference=_reference(tmp_path)), use_ray=False)[2]
    with caplog.at_level("WARNING", logger="mtcore.alignment.filter"):
        blanked = filter_table(table, FilterConfig(encoder=encoder_dir, reference=str(with_blank)), use_ray=False)[2]
    assert blanked == pytest.approx(plain) and "40 pair(s) with an empty side left out" in caplog.text


def test_a_corpus_too_small_for_the_margin_is_scored_by_cosine(encoder_dir, tmp_path, caplog):
    """With one pair every margin is 1.0 (the pair is its own neighbourhood): a review's single good pairs were all
    rejected. Below MIN_MARGIN_PAIRS distinct pairs, cosine scores them, and a warning says so."""
    three = tiny_corpus().slice(700, 3)
    src = write_parquet(three, tmp_path / "three.parquet")
    with caplog.at_level("WARNING", logger="mtcore.alignment.filter"):
        result = filter_corpus(src, tmp_path / "out", FilterConfig(encoder=encoder_dir, reference=_reference(tmp_path)),
                               use_ray=False, track=False)
    assert "too few for the margin" in caplog.text and result.report["score"] == "cosine"
    assert result.report["kept"] == 3
    assert "does not tell the known-good pairs from random" not in caplog.text  # 3 pairs' random partners repeat


def test_copies_are_said_to_score_as_aligned(encoder_dir, tmp_path, caplog):
    """A corpus of copies (target = source) kept 499 of 500 pairs with a noise share of 0.0 and no word."""
    pairs = tiny_corpus().slice(700, 20)
    copies = pairs.set_column(1, "tgt", pairs["src"]).slice(0, 10)
    src = write_parquet(pa.concat_tables([pairs.slice(10, 10), copies]), tmp_path / "copies.parquet")
    with caplog.at_level("WARNING", logger="mtcore.alignment.filter"):
        filter_corpus(src, tmp_path / "out", FilterConfig(encoder=encoder_dir, reference=_reference(tmp_path)),
                      use_ray=False, track=False)
    assert "10 of 20 pairs are copies (target = source)" in caplog.text


def test_a_given_threshold_beyond_every_score_is_said(encoder_dir, tmp_path, caplog):
    """--threshold 5 (a margin-scale habit carried to cosine) rejected a whole corpus with exit 0 and no word."""
    src = write_parquet(tiny_corpus().slice(700, 30), tmp_path / "c.parquet")
    with caplog.at_level("WARNING", logger="mtcore.alignment.filter"):
        result = filter_corpus(src, tmp_path / "out", FilterConfig(encoder=encoder_dir, score="cosine", threshold=5.0),
                               use_ray=False, track=False)
    assert result.report["kept"] == 0 and "--threshold 5 is above every pair's cosine score" in caplog.text
    # a threshold given on the margin's scale keeps the margin on a corpus under MIN_MARGIN_PAIRS (above 2k pairs)
    kept_margin = filter_corpus(src, tmp_path / "out2", FilterConfig(encoder=encoder_dir, threshold=1.0), use_ray=False, track=False)
    assert kept_margin.report["score"] == "margin"
    # ... and under 2k + 1 it cannot: the margin's threshold was applied to cosine scores, and every pair rejected
    few = write_parquet(tiny_corpus().slice(700, 6), tmp_path / "few.parquet")
    with pytest.raises(FilterError, match=r"6 distinct pairs are too few for the margin .*--threshold 1.05 is on the margin's"):
        filter_corpus(few, tmp_path / "out3", FilterConfig(encoder=encoder_dir, threshold=1.05), use_ray=False, track=False)


def test_an_encoders_reference_pairs_are_turned_round_for_a_corpus_of_the_reverse_pair(encoder_dir, tmp_path):
    """The encoder's reference pairs were read as en-vi whatever the corpus: for a vi-en corpus the threshold was
    calibrated on English sources beside Vietnamese ones (bands of other words, margins on another scale), and an
    encoder trained on vi-en (its reference written vi-en) was refused after the whole corpus was encoded."""
    import shutil

    from mtcore.alignment.filter import reference_pairs
    from mtcore.data.corpus import swap_sides
    from mtcore.embedding.encoder import METRICS_FILE, read_metrics

    enc = tmp_path / "encoder"
    shutil.copytree(encoder_dir, enc)
    _reference(enc)  # written where an encoder keeps its own: enc/reference.parquet, en-vi
    table, _ = corpus_with_misalignments(20, start=700)
    ev = filter_table(table, FilterConfig(encoder=str(enc), score="margin"), use_ray=False)
    ve = filter_table(swap_sides(table), FilterConfig(encoder=str(enc), score="margin", langs=("vi", "en")), use_ray=False)
    assert ve[3].ref_source == str(enc / "reference.parquet")  # calibrated on the encoder's own pairs, not near misses
    assert ve[2] == pytest.approx(ev[2])  # the same threshold
    assert sorted(ve[1]["id"].to_pylist()) == sorted(ev[1]["id"].to_pylist())
    ref, _ = reference_pairs(FilterConfig(encoder=str(enc), langs=("vi", "en")), str(enc))
    assert ref["src"].to_pylist()[:3] == tiny_corpus().slice(600, 3)["tgt"].to_pylist()

    pq.write_table(swap_sides(pq.read_table(enc / "reference.parquet")), enc / "reference.parquet")
    (enc / METRICS_FILE).write_text(json.dumps({**read_metrics(enc), "langs": "vi-en"}))
    ref, _ = reference_pairs(FilterConfig(encoder=str(enc), langs=("vi", "en")), str(enc))  # a vi-en encoder's own
    assert ref["src"].to_pylist()[:3] == tiny_corpus().slice(600, 3)["tgt"].to_pylist()
    ref, _ = reference_pairs(FilterConfig(encoder=str(enc)), str(enc))  # the same pairs for an en-vi corpus
    assert ref["src"].to_pylist()[:3] == tiny_corpus().slice(600, 3)["src"].to_pylist()


def test_the_pair_classifier_runs_in_a_pool_of_cpu_actors_on_a_gpu_cluster():
    """It ran on the CPU whatever the device, in a pool of one actor per GPU that held the GPUs."""
    from mtcore.alignment.filter import ClassifierPairs, DualXentPairs, actor_pool

    assert actor_pool(ClassifierPairs, 100_000, 1024, 0, cpus=16, gpus=2) == (16, {"num_cpus": 1}, "cpu")
    assert actor_pool(DualXentPairs, 100_000, 1024, 0, cpus=16, gpus=2) == (2, {"num_gpus": 1}, "cuda")
    assert actor_pool(DualXentPairs, 100_000, 1024, 0, cpus=2, gpus=0) == (2, {"num_cpus": 1}, "cpu")
    assert actor_pool(ClassifierPairs, 1_500, 1024, 0, cpus=16, gpus=0)[0] == 2  # no more actors than batches
