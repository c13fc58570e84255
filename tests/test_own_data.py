"""A user's own corpus, in every shape the README names, through clean → align_filter → train (tiny).

`origin`/`id` are derived by the corpus reader alone: `origin` is the file (or prefix) name and `id`
is NAME:N with N the line or row counted from 1, whatever the shape.
"""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mtcore.alignment.filter import FilterConfig, filter_corpus
from mtcore.cleaning import clean_dataset
from mtcore.config import ModelConfig, TrainConfig
from mtcore.data.corpus import read_corpus
from mtcore.nmt.tokenizer import train_tokenizer
from mtcore.nmt.training import fit, oriented_pairs
from test_embedding import tiny_corpus, tiny_encoder

SHAPES = ["tsv", "moses", "parquet_src_tgt", "parquet_extra", "tsv_gz", "moses_gz"]


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("enc")
    return str(tiny_encoder(tmp, trained=True).save(tmp / "encoder"))


def write_shape(shape: str, root, pairs) -> tuple[str, str]:
    """(the path a user passes, the origin the reader gives it)."""
    src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
    lines = "".join(f"{s}\t{t}\n" for s, t in pairs)
    if shape == "tsv":
        (root / "own.tsv").write_text(lines, encoding="utf-8")
        return str(root / "own.tsv"), "own.tsv"
    if shape == "tsv_gz":
        (root / "own.tsv.gz").write_bytes(gzip.compress(lines.encode()))
        return str(root / "own.tsv.gz"), "own.tsv.gz"
    if shape in ("moses", "moses_gz"):
        for lang, side in (("en", src), ("vi", tgt)):
            body = ("\n".join(side) + "\n").encode()
            if shape == "moses":
                (root / f"train.{lang}").write_bytes(body)
            else:
                (root / f"train.{lang}.gz").write_bytes(gzip.compress(body))
        return str(root / "train"), "train"
    table = pa.table({"src": src, "tgt": tgt})
    if shape == "parquet_extra":
        table = table.append_column("score", pa.array([0.5] * len(src))).append_column("note", pa.array(["x"] * len(src)))
    pq.write_table(table, root / "own.parquet")
    return str(root / "own.parquet"), "own.parquet"


@pytest.mark.parametrize("shape", SHAPES)
def test_own_corpus_runs_clean_align_train(shape, tmp_path, ray_local, encoder_dir):
    pairs = list(zip(tiny_corpus().slice(600)["src"].to_pylist(), tiny_corpus().slice(600)["tgt"].to_pylist()))
    path, origin = write_shape(shape, tmp_path, pairs)

    read = read_corpus(path)
    assert set(read["origin"].to_pylist()) == {origin}
    assert read["id"].to_pylist()[:2] == [f"{origin}:1", f"{origin}:2"]

    cleaned = clean_dataset(path, tmp_path / "clean")
    report = cleaned.report
    assert report["input"] == len(pairs) and report["kept"] + sum(report["rejected"].values()) == len(pairs)
    kept = read_corpus(tmp_path / "clean" / "kept")
    assert set(kept["origin"].to_pylist()) == {origin} and all(i.startswith(f"{origin}:") for i in kept["id"].to_pylist())
    if shape == "parquet_extra":
        assert {"score", "note"} <= set(kept.column_names)  # the user's columns travel with their rows

    aligned = filter_corpus(tmp_path / "clean" / "kept", tmp_path / "align", FilterConfig(encoder=encoder_dir),
                            use_ray=False, track=False)
    body = json.loads((tmp_path / "align" / "report.json").read_text())
    assert body["input"] == report["kept"] and aligned.report["kept"] > 0

    model_cfg = ModelConfig.preset("tiny")
    train = oriented_pairs(read_corpus(tmp_path / "align" / "kept"), model_cfg)
    tok = train_tokenizer([s for p in train for s in p], tmp_path / "spm.model", vocab_size=400)
    result = fit(TrainConfig(max_tokens=400, max_len=64, max_steps=3, warmup=2, validate_every=0, dev_limit=5),
                 model_cfg, train, train[:5], tok)
    assert result.steps == 3 and result.last_metrics["dev/bleu"] >= 0


def test_readme_own_data_commands(tmp_path, monkeypatch, ray_local, mlflow_uri, capsys):
    """The README's "Your own data" commands as typed there (relative paths), with tiny training settings."""
    from test_entry_points import ROOT, script

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    table = tiny_corpus()
    pairs = list(zip(table["src"].to_pylist()[:300], table["tgt"].to_pylist()[:300]))
    write_shape("tsv", tmp_path, pairs)
    (tmp_path / "corpus").mkdir()
    write_shape("moses", tmp_path / "corpus", pairs)
    write_shape("parquet_extra", tmp_path, pairs)
    pq.write_table(pa.table({"translation": [{"en": s, "vi": t} for s, t in pairs]}), tmp_path / "hf.parquet")
    clean = script("pipelines/clean.py")
    for args in (["--input", "own.tsv", "--output", "runs/own-tsv"],
                 ["--input", "corpus/train", "--output", "runs/own-moses"],
                 ["--input", "own.parquet", "--output", "runs/own-parquet"],
                 ["--input", "hf.parquet", "--output", "runs/own-hf"]):
        assert clean(args) == 0, args
        assert json.loads((tmp_path / args[3] / "report.json").read_text())["input"] == 300
    assert "reusing runs/own-tsv" in (clean(["--input", "own.tsv", "--output", "runs/own-tsv"]) == 0 and
                                      capsys.readouterr().out)
    dev = str(tmp_path / "own.parquet")
    train = script("experiments/train_transformer.py")
    assert train(["--data", "runs/own-tsv", "--config", str(ROOT / "experiments/configs/tiny.yaml"),
                  f"job.dev_data={dev}", f"job.test_data={dev}", "job.test_limit=5", "job.vocab_size=400",
                  "job.log_model=false", "train.max_steps=4"]) == 0
    out = capsys.readouterr().out
    assert "test BLEU" in out


def test_dev_pairs_too_long_for_dev_loss_are_counted_and_none_left_is_refused(tmp_path, caplog):
    """Dev loss skipped dev pairs over train.max_len without a word, and with none left it read 0.0: a "perfect"
    score that picked the checkpoint under best_metric=loss."""
    from mtcore.nmt.batching import BatchingError

    table = tiny_corpus()
    train = list(zip(table["src"].to_pylist()[:200], table["tgt"].to_pylist()[:200]))
    tok = train_tokenizer([s for p in train for s in p], tmp_path / "spm.model", vocab_size=400)
    long = [(" ".join([s] * 12), " ".join([t] * 12)) for s, t in train[:3]]
    cfg = TrainConfig(max_tokens=400, max_len=48, max_steps=2, warmup=1, validate_every=0, dev_limit=10)
    with caplog.at_level("WARNING", logger="mtcore.nmt.training"):
        fit(cfg, ModelConfig.preset("tiny"), train, train[:5] + long, tok)
    assert "dev loss leaves out 3 of 8 dev pairs (3 longer than max_len=48" in caplog.text
    with pytest.raises(BatchingError, match="none of the 3 dev pairs fits `train.max_len`"):
        fit(cfg, ModelConfig.preset("tiny"), train, long, tok)


def test_averaging_more_snapshots_than_a_short_run_holds_says_so(tmp_path, caplog):
    """`--average 5` on a 20-step run (snapshots every 100 steps) averaged nothing and said nothing."""
    table = tiny_corpus()
    train = list(zip(table["src"].to_pylist()[:200], table["tgt"].to_pylist()[:200]))
    tok = train_tokenizer([s for p in train for s in p], tmp_path / "spm.model", vocab_size=400)
    for steps, said in ((1, "averaging skipped: the run ended at step 1, which holds 1 of the last 5 snapshots taken every 2"),
                        (5, "averaging 3 snapshots: the run ended at step 5, which holds 3 of the last 5")):
        caplog.clear()
        cfg = TrainConfig(max_tokens=400, max_len=48, max_steps=steps, warmup=1, validate_every=0, dev_limit=5,
                          average_last=5, average_every=2)
        with caplog.at_level("WARNING", logger="mtcore.nmt.training"):
            fit(cfg, ModelConfig.preset("tiny"), train, train[:5], tok)
        assert said in caplog.text
