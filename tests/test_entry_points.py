"""The README's commands, run as a user runs them (their `main`), with tiny settings."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from mtcore.data.corpus import write_parquet
from mtcore.nmt.training import toy_pairs

ROOT = Path(__file__).resolve().parent.parent


def script(relpath: str):
    spec = importlib.util.spec_from_file_location(Path(relpath).stem, ROOT / relpath)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.fixture(scope="module")
def toy_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    pairs = toy_pairs(360, seed=5)

    def table(rows, name):
        return pa.table({"src": [s for s, _ in rows], "tgt": [t for _, t in rows], "origin": ["toy"] * len(rows),
                         "id": [f"{name}{i}" for i in range(len(rows))]})

    paths = {name: write_parquet(table(rows, name), root / f"{name}.parquet")
             for name, rows in (("train", pairs[:280]), ("dev", pairs[280:320]), ("test", pairs[320:]))}
    (root / "mono.vi").write_text("\n".join(t for _, t in pairs[280:]) + "\n", encoding="utf-8")
    return root, paths


def test_clean_cli_prints_reconciled_summary(ray_local, mlflow_uri, tmp_path, capsys):
    tsv = tmp_path / "c.tsv"
    tsv.write_text("Open the file\tMở tập tin\nOpen the file\tMở tập tin\nSave %s\tLưu\n", encoding="utf-8")
    assert script("pipelines/clean.py")(["--input", str(tsv), "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "rejected: duplicate" in out and "rejected: placeholder_mismatch" in out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["input"] == 3 and report["kept"] == 1
    # --format txt: the kept pairs as a Moses pair too, for other toolkits (the stage itself is reused)
    assert script("pipelines/clean.py")(["--input", str(tsv), "--output", str(tmp_path / "out"), "--format", "txt"]) == 0
    assert "kept as text" in capsys.readouterr().out
    assert (tmp_path / "out" / "kept.en").read_text(encoding="utf-8") == "Open the file\n"
    assert (tmp_path / "out" / "kept.vi").read_text(encoding="utf-8") == "Mở tập tin\n"


def test_clean_reads_tsv_from_stdin_and_reuses_the_same_input(ray_local, mlflow_uri, tmp_path, capsys, monkeypatch):
    import io
    import sys

    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "ws"))
    data = "Open the file\tMở tập tin\nSave the file\tLưu tập tin\nOpen the file\tMở tập tin\n".encode()
    argv = ["--input", "-", "--output", str(tmp_path / "out"), "--no-mlflow"]
    for attempt in range(2):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
        assert script("pipelines/clean.py")(argv) == 0
        out = capsys.readouterr().out
        assert ("reusing" in out) == (attempt == 1), out  # the same stdin is the same input: the stage is reused
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (report["input"], report["kept"], report["rejected"]) == (3, 2, {"duplicate": 1})
    assert [p.suffix for p in (tmp_path / "ws" / "stdin").iterdir()] == [".tsv"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n"), encoding="utf-8"))
    assert script("pipelines/clean.py")(["--input", "-", "--output", str(tmp_path / "empty"), "--no-mlflow"]) == 2
    assert "standard input is empty" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Open\tMo\n\xff\tx\n"), encoding="utf-8"))
    assert script("pipelines/clean.py")(["--input", "-", "--output", str(tmp_path / "bad"), "--no-mlflow"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: stdin:2: invalid UTF-8") and "/stdin/" not in err, err  # not the saved copy's name


def test_home_option_moves_the_default_outputs(ray_local, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "env-home"))  # restored after the test; --home must win over it
    tsv = tmp_path / "c.tsv"
    tsv.write_text("Open the file\tMở tập tin\n", encoding="utf-8")
    assert script("pipelines/clean.py")(["--input", str(tsv), "--home", str(tmp_path / "ws"), "--no-mlflow"]) == 0
    assert json.loads((tmp_path / "ws" / "clean" / "report.json").read_text())["kept"] == 1
    assert not (tmp_path / "env-home").exists()


def test_text_export_keeps_lines_aligned(tmp_path):
    import pyarrow as pa

    from mtcore.data.corpus import write_parquet
    from mtcore.data.text_export import export_text

    write_parquet(pa.table({"src": ["a\tb", "two\nlines", "plain"], "tgt": ["x", "y", "z\r\nw"],
                            "origin": ["t"] * 3, "id": ["1", "2", "3"]}), tmp_path / "c.parquet")
    (tsv,) = export_text(tmp_path / "c.parquet", "tsv", tmp_path / "out")
    assert tsv.read_text(encoding="utf-8").splitlines() == ["a b\tx", "two lines\ty", "plain\tz w"]
    src, tgt = export_text(tmp_path / "c.parquet", "txt", tmp_path / "out", ("de", "en"))
    assert (src.name, tgt.name) == ("out.de", "out.en")
    assert len(src.read_text(encoding="utf-8").splitlines()) == len(tgt.read_text(encoding="utf-8").splitlines()) == 3
    assert export_text(tmp_path / "c.parquet", "parquet", tmp_path / "out") == []
    # a stage that kept nothing exports empty files (it was "corpus is empty", exit 2, after the summary)
    empty = tmp_path / "kept"
    write_parquet(pa.table({"src": pa.array([], pa.string()), "tgt": pa.array([], pa.string())}), empty / "part-0.parquet")
    src, tgt = export_text(empty, "txt", tmp_path / "none")
    assert src.read_text(encoding="utf-8") == tgt.read_text(encoding="utf-8") == ""
    # a vi-en stage's kept pairs (Vietnamese in src) were refused as "columns swapped" after the stage had run
    vi = ["Không thể mở tập tin cấu hình số %d của người dùng" % i for i in range(30)]
    en = ["Cannot open the user's configuration file number %d" % i for i in range(30)]
    write_parquet(pa.table({"src": vi, "tgt": en, "origin": ["t"] * 30, "id": [str(i) for i in range(30)]}),
                  tmp_path / "vi-en" / "part-0.parquet")
    src, tgt = export_text(tmp_path / "vi-en", "txt", tmp_path / "kept", ("vi", "en"))
    assert (src.name, tgt.name) == ("kept.vi", "kept.en") and src.read_text(encoding="utf-8").splitlines() == vi


def test_train_transformer_cli_tiny(ray_local, mlflow_uri, tmp_path, monkeypatch, capsys, toy_files):
    root, paths = toy_files
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    args = ["--config", str(ROOT / "experiments/configs/tiny.yaml"), "--workers", "2", "--run-name", "cli-tiny",
            f"job.train_data={paths['train']}", f"job.dev_data={paths['dev']}", f"job.test_data={paths['test']}",
            "job.vocab_size=400", "job.log_model=false", "train.max_steps=10"]
    assert script("experiments/train_transformer.py")(args) == 0
    out = capsys.readouterr().out
    assert "test BLEU" in out and "nrefs:1" in out and "2 × CPU, 10 steps" in out
    assert "workers      2 × CPU" in out.splitlines()[0]  # the plan comes first
    assert any(line.startswith("step     10  dev BLEU") and "(best" in line for line in out.splitlines())  # progress
    assert "best ckpt    dev BLEU " in out
    # chosen by dev loss: the summary says its loss (it printed a dev BLEU of 0.00 that chose nothing)
    assert script("experiments/train_transformer.py")([*args[:5], "by-loss", *args[6:-1], "train.max_steps=4",
                                                        "train.best_metric=loss"]) == 0
    assert re.search(r"best ckpt    dev loss \d+\.\d{3}  \(", capsys.readouterr().out)


def test_a_dry_run_reads_the_dev_and_test_sets(ray_local, tmp_path, capsys):
    """It exited 0 on a missing dev set (and on a damaged one); the run then failed after Ray had started."""
    assert script("experiments/train_transformer.py")(["--dry-run", f"job.dev_data={tmp_path / 'no_dev.tsv'}"]) == 2
    assert f"error: job.dev_data: {tmp_path / 'no_dev.tsv'}: file not found" in capsys.readouterr().err
    (tmp_path / "test.tsv").write_text("Open\tMở\nSave\tLưu\tthird\n", encoding="utf-8")
    assert script("experiments/train_transformer.py")(["--dry-run", f"job.test_data={tmp_path / 'test.tsv'}"]) == 2
    assert "test.tsv:2" in capsys.readouterr().err


def test_train_transformer_cli_bad_override(capsys):
    assert script("experiments/train_transformer.py")(["model.heads=3"]) == 2
    assert "`heads` (3) must divide `d_model` (128)" in capsys.readouterr().err  # auto → mini on CPU


def test_train_encoder_cli_tiny(ray_local, mlflow_uri, tmp_path, capsys, toy_files):
    root, paths = toy_files
    args = ["--corpus", str(paths["train"]), "--output", str(tmp_path / "enc"), "--epochs", "1", "--batch-size", "64",
            "--vocab-size", "400", "--no-mlflow"]
    assert script("pipelines/train_encoder.py")(args) == 0
    assert (tmp_path / "enc" / "model.pt").exists() or any((tmp_path / "enc").iterdir())
    capsys.readouterr()
    args = ["--corpus", str(paths["train"]), "--output", str(tmp_path / "enc"), "--classifier-only", "--classifier-epochs", "1"]
    assert script("pipelines/train_encoder.py")(args) == 0
    assert "pair classifier → " in capsys.readouterr().out and (tmp_path / "enc-classifier" / "classifier.pt").is_file()
    args[3] = str(tmp_path / "no-encoder")
    assert script("pipelines/train_encoder.py")(args) == 2
    assert "holds no encoder" in capsys.readouterr().err


def test_backtranslate_cli_bad_mono_fails_before_work(tmp_path, capsys):
    rc = script("pipelines/backtranslate.py")(["--mono", str(tmp_path / "none.vi"), "--output", str(tmp_path / "o")])
    assert rc == 2 and "--mono" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_print_config_writes_yaml_alone_to_stdout(tmp_path):
    """`--print-config > job.yaml` then `--config job.yaml`: the local Ray's start line went to stdout too, and the
    file was not YAML."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_"))} | {"MTCORE_HOME": str(tmp_path)}
    printed = subprocess.run([sys.executable, str(ROOT / "experiments/train_transformer.py"), "--print-config",
                              "model.preset=tiny"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert printed.returncode == 0, printed.stderr
    import yaml

    config = yaml.safe_load(printed.stdout)
    assert config["model"]["d_model"] == 64 and config["job"]["experiment"] == "train_transformer" and "train" in config
    assert "started a local Ray instance" in printed.stderr  # said, on stderr
