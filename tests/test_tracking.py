"""MLflow store selection: the default SQLite store, and a dead server never crashes a job."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from mtcore import tracking


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_default_is_local_sqlite(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path))
    assert tracking.tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_unreachable_server_falls_back_with_one_warning(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path))
    monkeypatch.setattr(tracking, "_warned", False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    with caplog.at_level("WARNING", logger="mtcore.tracking"):
        assert tracking.tracking_uri().startswith("sqlite:///")
        assert tracking.tracking_uri().startswith("sqlite:///")  # a second call does not warn again
    assert [r.getMessage().count("unreachable; recording this run to") for r in caplog.records] == [1]


def test_the_report_never_reads_the_fallback_store(monkeypatch, tmp_path):
    """With the environment's server down it printed the local store's leaderboard under a warning about recording."""
    from mtcore.tracking import report

    monkeypatch.setenv("MTCORE_HOME", str(tmp_path))
    dead = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", dead)
    with pytest.raises(Exception, match=re.escape(dead)):
        report.build()


def test_setup_creates_experiment_and_logs_a_run(mlflow_uri):
    mlflow = tracking.setup("unit-test")
    with mlflow.start_run(run_name="r") as run:
        mlflow.log_params(tracking.flatten({"model": {"heads": 4, "d_model": 64}, "seed": 1}))
        mlflow.log_metric("dev/bleu", 12.5)
    got = mlflow.get_run(run.info.run_id)
    assert got.data.params == {"model.heads": "4", "model.d_model": "64", "seed": "1"}
    assert got.data.metrics["dev/bleu"] == 12.5


def test_flatten_truncates_long_values():
    assert len(tracking.flatten({"x": "a" * 2000})["x"]) == tracking.MAX_PARAM_CHARS


def test_a_rule_list_is_one_param_per_setting():
    """Two clean runs whose LengthRatio bounds differ must differ in MLflow (the list was one string, cut at 500)."""
    rules = [{"NonEmpty": {}}, {"LengthRatio": {"min_ratio": 0.2, "max_ratio": 3.0}}, {"LengthRatio": {"min_ratio": 0.5}}]
    flat = tracking.flatten({"config": {"rules": rules}})
    assert flat["config.rules.order"] == "NonEmpty,LengthRatio,LengthRatio"
    assert flat["config.rules.LengthRatio.max_ratio"] == "3.0" and flat["config.rules.LengthRatio_2.min_ratio"] == "0.5"
    from mlflow.utils.validation import _validate_param_name

    for name in flat:  # `LengthRatio#2` was refused by MLflow, and the clean stage's run kept no params or metrics
        _validate_param_name(name)


def test_data_version_changes_with_content(tmp_path):
    f = tmp_path / "c.parquet"
    f.write_bytes(b"one")
    before = tracking.data_version(f)
    f.write_bytes(b"two")
    assert tracking.data_version(f) != before


def test_standard_tags_name_entry_point_commit_and_data(tmp_path):
    corpus = tmp_path / "c.tsv"
    corpus.write_text("a\tb\n")
    tags = tracking.standard_tags("pipelines/clean.py", corpus, preset="tiny")
    assert tags["mtcore.entry_point"] == "pipelines/clean.py"
    assert tags["mtcore.data_version"] == tracking.data_version(corpus) and len(tags["mtcore.data_version"]) == 12
    assert tags["mtcore.git_commit"] == tracking.git_commit() and tags["mtcore.preset"] == "tiny"


def test_experiments_open_as_model_training_in_the_ui(mlflow_uri, tmp_path):
    """MLflow 3's UI shows an untagged experiment as a GenAI traces page; ours open on the runs table."""
    import mlflow

    tracking.setup("kind-test")
    exp = mlflow.MlflowClient(mlflow_uri).get_experiment_by_name("kind-test")
    assert exp.tags[tracking.EXPERIMENT_KIND_TAG] == "custom_model_development"
    assert exp.artifact_location == (tmp_path / "mlartifacts").as_uri()


def test_clean_stage_logs_report_and_histograms(ray_local, mlflow_uri, tmp_path):
    import mlflow

    from mtcore.cleaning import clean_dataset

    tsv = tmp_path / "c.tsv"
    tsv.write_text("Open the file\tMở tập tin\nOpen the file\tMở tập tin\nSave %s\tLưu\nQuit\tThoát\n"
                   "Close the window now\tĐóng\n", encoding="utf-8")
    result = clean_dataset(tsv, tmp_path / "out", track=True)
    run = mlflow.MlflowClient(mlflow_uri).get_run(result.report["mlflow_run_id"])
    assert run.info.run_name == "clean-c" and run.info.status == "FINISHED"
    assert run.data.tags["mtcore.entry_point"] == "pipelines/clean.py"
    assert run.data.tags["mtcore.data_version"] == tracking.data_version(tsv)
    m = run.data.metrics
    assert m["clean/input"] == 5 and m["clean/kept"] == result.report["kept"]
    assert m["clean/rejected_total"] == 5 - result.report["kept"] and m["clean/rejected/duplicate"] == 1
    client = mlflow.MlflowClient(mlflow_uri)
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"report.json", "plots"}
    plots = {a.path: a.file_size for a in client.list_artifacts(run.info.run_id, "plots")}
    assert set(plots) == {"plots/rejects_by_reason.png", "plots/score_histograms.png"}
    assert all(size > 5000 for size in plots.values())


def test_run_lookup_survives_quotes_in_user_paths(mlflow_uri):
    """A run name made from `--output "bt'q"` is found without pasting it into a filter string."""
    mlflow = tracking.setup("unit-quotes")
    client = mlflow.MlflowClient()
    exp = mlflow.get_experiment_by_name("unit-quotes")
    for name in ("bt-beam-bt'q", 'say "hi" \\ there', "plain-name"):
        run = client.create_run(exp.experiment_id, run_name=name)
        found = tracking.find_runs(client, exp.experiment_id, "mlflow.runName", name)
        assert [r.info.run_id for r in found] == [run.info.run_id]


def test_a_failing_entry_point_ends_its_runs_failed(mlflow_uri, capsys):
    from mtcore.errors import entry_point
    from mtcore.tracking.report import ReportError

    mlflow = tracking.setup("unit-failed")
    client = mlflow.MlflowClient()
    exp = mlflow.get_experiment_by_name("unit-failed")
    opened = client.create_run(exp.experiment_id, run_name="client-run").info.run_id

    @entry_point
    def main(argv=None):
        tracking.opened(opened, mlflow_uri)
        mlflow.start_run(run_name="fluent-run")
        raise ReportError("x.db: broken; fix it")

    assert main([]) == 2
    assert [l for l in capsys.readouterr().err.splitlines() if l.startswith("error:")] == ["error: x.db: broken; fix it"]
    statuses = {r.info.run_name: r.info.status for r in client.search_runs([exp.experiment_id])}
    assert statuses == {"client-run": "FAILED", "fluent-run": "FAILED"}


def test_dead_server_fails_in_seconds():
    import time

    t0 = time.perf_counter()
    with pytest.raises(tracking.TrackingError, match=f"127.0.0.1:{(port := free_port())}: MLflow tracking server does not answer"):
        tracking.require_server(f"http://127.0.0.1:{port}")
    assert time.perf_counter() - t0 < 15


def test_translator_is_logged_as_code_not_a_pickle(mlflow_uri, tmp_path):
    """The pyfunc model is a models-from-code model: its MLmodel names a Python file, no pickled object."""
    import mlflow
    import torch

    from mtcore.config import ModelConfig
    from mtcore.nmt.checkpoint import save_checkpoint
    from mtcore.nmt.model import build_model
    from mtcore.nmt.tokenizer import train_tokenizer
    from mtcore.nmt.training import toy_pairs
    from mtcore.tracking.pyfunc import log_translator

    torch.manual_seed(0)
    tok = train_tokenizer([s for p in toy_pairs(40) for s in p], tmp_path / "spm.model", vocab_size=400)
    ckpt = save_checkpoint(tmp_path / "ckpt", build_model(ModelConfig.preset("tiny", vocab_size=tok.vocab_size)), tok)
    tracking.setup("unit-pyfunc")
    with mlflow.start_run() as run:
        log_translator(ckpt)
    local = Path(mlflow.artifacts.download_artifacts(f"runs:/{run.info.run_id}/translator", dst_path=str(tmp_path / "dl")))
    assert "translator_model.py" in (local / "MLmodel").read_text()
    assert not list(local.rglob("python_model.pkl"))
    model = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/translator")
    out = model.predict(["Open the file"], params={"beam": 1})
    assert len(out) == 1 and isinstance(out[0], str)
    # the params reach the decoder: the same settings through mtcore's own call, and a length limit that bites
    from mtcore.config import DecodeConfig
    from mtcore.nmt.checkpoint import load_checkpoint
    from mtcore.nmt.decoding import translate

    own = load_checkpoint(ckpt)
    assert out == translate(own.model, own.tokenizer, ["Open the file"], DecodeConfig(beam=1))
    assert model.predict(["Open the file"]) == translate(own.model, own.tokenizer, ["Open the file"], DecodeConfig())
    short = model.predict(["Open the file"], params={"beam": 1, "max_len_a": 0.01, "max_len_b": 0})
    assert len(short[0]) < len(out[0])
    # A blank row (pandas reads a blank CSV line as NaN) is a blank translation, not the translation of "nan".
    import io

    import pandas as pd

    frame = pd.read_csv(io.StringIO("src\nOpen the file\n\n   \n"), skip_blank_lines=False)
    assert model.predict(frame, params={"beam": 1}) == [out[0], "", ""]


def test_attention_heatmaps_of_pieces_the_font_cannot_draw_name_their_code_points(tmp_path):
    """CJK pieces were empty boxes, and matplotlib warned once per glyph (390 of a ja-en run's 407 lines)."""
    import warnings

    import numpy as np

    from mtcore.tracking.plots import _drawable, attention_heatmap

    assert _drawable(["▁猫", "Việt", "▁the"]) == ["▁U+732B", "Việt", "▁the"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing glyph warns
        path = attention_heatmap(np.eye(2), ["▁猫", "です"], ["▁the", "cat"], "猫 → the cat", tmp_path / "h.png")
    assert path.stat().st_size > 1000


def test_the_browse_hint_names_the_store_that_was_used(tmp_path, monkeypatch):
    """After train/tune: a tracking server's address, or the UI command of this workspace (a plain
    `python -m mtcore.ui` opened the default workspace's empty store after `--home X`)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MTCORE_HOME", raising=False)
    assert tracking.browse_hint() == "python -m mtcore.ui  (then http://127.0.0.1:5000)"
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "ws"))
    assert tracking.browse_hint() == f"python -m mtcore.ui --home {tmp_path / 'ws'}  (then http://127.0.0.1:5000)"


def test_the_run_description_names_every_limit_of_the_run():
    """A run stopped at max_steps=120 after a minute was described as trained "with a 11-minute budget"."""
    from mtcore.tracking.artifacts import run_description

    config = {"model": {"arch": "transformer", "d_model": 128, "layers": 2, "heads": 4, "src_lang": "en", "tgt_lang": "vi"},
              "train": {"time_budget_min": 11.0, "max_steps": 120, "max_epochs": 50}, "job": {"test_beam": 5}}
    result = {"test/bleu": 20.0, "test/bleu_signature": "sig", "test/chrf": 40.0, "test/chrf_signature": "sig"}
    text = run_description(config, result, "train.tsv", "test.tsv", 100)
    assert "trained on train.tsv with at most 11 minutes, 120 steps, 50 epochs." in text
    config["train"] |= {"time_budget_min": 0, "max_steps": 0}
    assert "with at most 50 epochs." in run_description(config, result, "train.tsv", "test.tsv", 100)
