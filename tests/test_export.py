"""Export: a tiny trained Transformer taken to CTranslate2 and to HF Marian translates as mtcore does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sacrebleu
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: everything is local, never the Hub
ctranslate2 = pytest.importorskip("ctranslate2")  # the `test` extra installs both
transformers = pytest.importorskip("transformers")

from mtcore.config import ModelConfig, TrainConfig  # noqa: E402
from mtcore.nmt.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from mtcore.nmt.decoding import encode_sources, translate  # noqa: E402
from mtcore.nmt.export import ExportError, main, to_ctranslate2, to_hf  # noqa: E402
from mtcore.nmt.exported import translate_ctranslate2, translate_hf  # noqa: E402
from mtcore.nmt.model import build_model  # noqa: E402
from mtcore.nmt.tokenizer import BOS_ID, EOS_ID, Tokenizer, train_tokenizer  # noqa: E402
from mtcore.nmt.training import fit, toy_pairs  # noqa: E402

torch.set_num_threads(1)
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TRAIN = toy_pairs(64)
HELD_OUT = toy_pairs(360)[250:330]  # not trained on: imperfect, varied output
SOURCES = [s for s, _ in TRAIN[:20]] + [s for s, _ in HELD_OUT]
POSITIONS = ModelConfig.preset("tiny").max_positions


def quick(steps: int) -> TrainConfig:
    # fp32 on every machine: these tests are about the exports, and their bounds (how many beam outputs CTranslate2
    # may find differently) were set on an fp32 model; a bf16-trained one here differed on 25 of 100, not <= 10
    return TrainConfig(max_tokens=256, warmup=100, lr_scale=0.5, label_smoothing=0.0, max_epochs=1000, validate_every=0,
                       log_every=10**6, patience=0, dev_limit=8, max_len=64, max_steps=steps, bf16=False)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer([s for p in toy_pairs(360) for s in p], tmp_path_factory.mktemp("spm") / "spm.model", vocab_size=500)


def trained(tokenizer, directory, steps, **model_kw):
    torch.manual_seed(0)
    result = fit(quick(steps), ModelConfig.preset("tiny", dropout=0.0, **model_kw), TRAIN, TRAIN, tokenizer)
    return load_checkpoint(save_checkpoint(directory, result.model, tokenizer))


@pytest.fixture(scope="module")
def ckpt(tokenizer, tmp_path_factory):
    return trained(tokenizer, tmp_path_factory.mktemp("post") / "ckpt", 150)


@pytest.fixture(scope="module")
def ct2_dir(ckpt, tmp_path_factory):
    return to_ctranslate2(ckpt.path, tmp_path_factory.mktemp("ct2") / "model")


@pytest.fixture(scope="module")
def hf_dir(ckpt, tmp_path_factory):
    return to_hf(ckpt.path, tmp_path_factory.mktemp("hf") / "model")


def ct2(directory):
    return ctranslate2.Translator(str(directory), device="cpu", intra_threads=1)


def hf(directory):
    return transformers.MarianMTModel.from_pretrained(str(directory)).eval()


def bleu(hyps):
    return sacrebleu.corpus_bleu(hyps, [[t for s, t in TRAIN[:20] + HELD_OUT]]).score


@torch.no_grad()
def mtcore_logprobs(model, sources, targets) -> torch.Tensor:
    """Teacher-forced log p(target_t | ...) of mtcore itself, (B, T) with EOS last."""
    src = torch.tensor(sources)
    tgt_in = torch.tensor([[BOS_ID] + t for t in targets])
    lp = model(src, tgt_in).log_softmax(-1)
    return lp.gather(-1, torch.tensor([t + [EOS_ID] for t in targets])[..., None])[..., 0]


# --------------------------------------------------------------------------- the same function


@pytest.mark.parametrize("pre_norm", [False, True])
def test_ctranslate2_scores_as_mtcore(ckpt, tokenizer, tmp_path, pre_norm):
    """Teacher-forced token log-probs agree: the weights, norms and positions are mapped right."""
    source = ckpt if not pre_norm else trained(tokenizer, tmp_path / "pre", 40, pre_norm=True)
    translator = ct2(to_ctranslate2(source.path, tmp_path / "ct2"))
    for src_text, tgt_text in HELD_OUT[:3]:
        src, tgt = encode_sources(tokenizer, [src_text]), tokenizer.encode([tgt_text])
        scored = translator.score_batch([[tokenizer.sp.id_to_piece(i) for i in src[0][:-1]]],
                                        [[tokenizer.sp.id_to_piece(i) for i in tgt[0]]])[0]
        assert scored.log_probs == pytest.approx(mtcore_logprobs(source.model, src, tgt)[0].tolist(), abs=1e-4)


def test_hf_export_draws_no_progress_bar(ckpt, tmp_path, capfd):
    to_hf(ckpt.path, tmp_path / "hf")
    assert "Writing model shards" not in capfd.readouterr().err  # past -q, for a one-file model


def test_hf_logits_as_mtcore(ckpt, hf_dir, tokenizer):
    src = torch.tensor(encode_sources(tokenizer, ["open the new window"]))
    tgt_in = torch.tensor([[BOS_ID] + tokenizer.encode(["mở cửa sổ mới"])[0]])
    with torch.no_grad():
        ours = ckpt.model(src, tgt_in).log_softmax(-1)
        theirs = hf(hf_dir)(input_ids=src, decoder_input_ids=tgt_in).logits.log_softmax(-1)
    assert theirs == pytest.approx(ours, abs=1e-4)


# --------------------------------------------------------------------------- the same translations


def test_ctranslate2_greedy_is_identical(ckpt, ct2_dir, tokenizer):
    ours = translate(ckpt.model, tokenizer, SOURCES, beam=1)
    # the tokenizer as a user loads it, from the export (whose record gives the model's max_positions)
    assert translate_ctranslate2(ct2(ct2_dir), Tokenizer(ct2_dir / "spm.model"), SOURCES, beam=1) == ours
    assert len(set(ours)) > 50 and bleu(ours) > 30  # a model that translates, not one that repeats a sentence


def test_hf_greedy_is_identical(ckpt, hf_dir, tokenizer):
    assert translate_hf(hf(hf_dir), tokenizer, SOURCES, beam=1) == translate(ckpt.model, tokenizer, SOURCES, beam=1)


def test_beam_without_length_penalty(ckpt, ct2_dir, hf_dir, tokenizer):
    """The one setting where all three score hypotheses alike (module doc of mtcore.nmt.export): HF stops
    as mtcore does and agrees exactly; CTranslate2 searches on, and where it differs its hypothesis is
    one mtcore's own model scores higher."""
    ours = translate(ckpt.model, tokenizer, SOURCES, beam=5, len_penalty=0.0)
    assert translate_hf(hf(hf_dir), tokenizer, SOURCES, beam=5, len_penalty=0.0) == ours
    theirs = translate_ctranslate2(ct2(ct2_dir), tokenizer, SOURCES, beam=5, len_penalty=0.0, max_positions=POSITIONS)
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert len(differ) <= len(SOURCES) // 10
    for i in differ:
        src = encode_sources(tokenizer, [SOURCES[i]])
        ours_lp, theirs_lp = (mtcore_logprobs(ckpt.model, src, tokenizer.encode([h])).sum().item() for h in (ours[i], theirs[i]))
        assert theirs_lp > ours_lp, (SOURCES[i], ours[i], theirs[i])


def test_beam_with_length_penalty_and_int8_stay_close(ckpt, ct2_dir, hf_dir, tokenizer, tmp_path):
    """mtcore's GNMT penalty vs |Y|^alpha, and int8 weights: not identical, but close in output and BLEU."""
    ours = translate(ckpt.model, tokenizer, SOURCES, beam=5)
    int8 = ct2(to_ctranslate2(ckpt.path, tmp_path / "int8", quantization="int8"))
    for hyps in (translate_ctranslate2(ct2(ct2_dir), tokenizer, SOURCES, beam=5, max_positions=POSITIONS),
                 translate_hf(hf(hf_dir), tokenizer, SOURCES, beam=5),
                 translate_ctranslate2(int8, tokenizer, SOURCES, beam=5, max_positions=POSITIONS)):
        assert sum(a == b for a, b in zip(ours, hyps)) >= 0.9 * len(SOURCES)
        assert abs(bleu(hyps) - bleu(ours)) < 3.0


# --------------------------------------------------------------------------- what is written


def test_exported_directories(ckpt, ct2_dir, hf_dir, tokenizer):
    assert {p.name for p in ct2_dir.iterdir()} >= {"model.bin", "config.json", "shared_vocabulary.json", "spm.model"}
    config = json.loads((ct2_dir / "config.json").read_text())
    assert (config["decoder_start_token"], config["add_source_eos"], config["layer_norm_epsilon"]) == ("<s>", True, 1e-5)
    info = json.loads((hf_dir / "mtcore_export.json").read_text())
    assert (info["format"], info["direction"]) == ("hf", "en-vi")
    assert (hf_dir / "spm.model").read_bytes() == tokenizer.model_bytes()
    # the saved MarianTokenizer encodes plain text as mtcore does (ids + </s>)
    hf_tok = transformers.MarianTokenizer.from_pretrained(str(hf_dir))
    texts = [s for s, _ in HELD_OUT[:10]]
    assert hf_tok(texts)["input_ids"] == encode_sources(tokenizer, texts)


def test_existing_output_is_refused_unless_forced(ckpt, tmp_path):
    """--force replaces an earlier export; a folder of other files never (the workspace, with its MLflow store, given
    as OUT with a runs:/ source, went whole)."""
    from mtcore.checks import UsageError

    to_ctranslate2(ckpt.path, tmp_path / "out")
    with pytest.raises(ExportError, match="exists and is not empty"):
        to_ctranslate2(ckpt.path, tmp_path / "out")
    (tmp_path / "out" / "stale.txt").write_text("x")  # inside an earlier export: it goes with it
    to_ctranslate2(ckpt.path, tmp_path / "out", force=True)
    assert not (tmp_path / "out" / "stale.txt").exists()
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "mlflow.db").write_text("x")
    with pytest.raises(UsageError, match=r"OUT: .*workspace holds files that are not an mtcore export \(mlflow.db\)"):
        to_ctranslate2(ckpt.path, tmp_path / "workspace", force=True)
    assert (tmp_path / "workspace" / "mlflow.db").read_text() == "x"


def test_an_export_stopped_halfway_leaves_out_as_it_was(ckpt, tmp_path, monkeypatch):
    """The converter wrote model.bin into OUT and mtcore_export.json last: an export stopped between them (Ctrl-C, a
    full disk) left a folder that a rerun refused and --force refused to replace. Now OUT changes only when whole."""
    from mtcore.nmt import export as export_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(export_module, "_write_info", interrupted)
    with pytest.raises(KeyboardInterrupt):
        to_ctranslate2(ckpt.path, tmp_path / "out")
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []  # no partial folder left either
    monkeypatch.undo()
    to_ctranslate2(ckpt.path, tmp_path / "out")
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()}
    monkeypatch.setattr(export_module, "_write_info", interrupted)
    with pytest.raises(KeyboardInterrupt):
        to_ctranslate2(ckpt.path, tmp_path / "out", force=True)
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()} == before  # the earlier export, intact
    monkeypatch.undo()
    to_ctranslate2(ckpt.path, tmp_path / "out", force=True)
    assert (tmp_path / "out" / "mtcore_export.json").is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_force_never_removes_the_checkpoint_it_exports(ckpt, tmp_path, capsys):
    import shutil

    own = tmp_path / "run" / "best"
    shutil.copytree(ckpt.path, own)
    before = sorted(p.name for p in own.iterdir())
    for out in (own, own.parent, own / "ct2"):  # the checkpoint, the run holding it, a folder inside it
        assert main(["--to", "ctranslate2", str(own), str(out), "--force"]) == 2
        assert "this is, holds or lies inside the checkpoint" in capsys.readouterr().err
    assert sorted(p.name for p in own.iterdir()) == before
    (tmp_path / "afile").write_text("x")
    assert main(["--to", "ctranslate2", str(own), str(tmp_path / "afile")]) == 2
    assert capsys.readouterr().err.strip().endswith("a file, not a directory; choose another OUT")


def test_rnn_and_pre_norm_hf_fail_with_one_clear_line(tokenizer, tmp_path, capsys):
    rnn = build_model(ModelConfig.preset("tiny", arch="rnn"), vocab_size=tokenizer.vocab_size)
    save_checkpoint(tmp_path / "rnn", rnn, tokenizer)
    assert main(["--to", "ctranslate2", str(tmp_path / "rnn"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "`rnn` checkpoint; only the Transformer can be exported" in err
    assert not (tmp_path / "out").exists()
    pre = build_model(ModelConfig.preset("tiny", pre_norm=True), vocab_size=tokenizer.vocab_size)
    save_checkpoint(tmp_path / "pre", pre, tokenizer)
    with pytest.raises(ExportError, match="Marian \\(HF\\) is post-norm only"):
        to_hf(tmp_path / "pre", tmp_path / "hf")


def test_command_line(ckpt, tmp_path):
    """`python -m mtcore.export` (the entry point the README names) writes a model CTranslate2 loads."""
    out = tmp_path / "int8"
    run = subprocess.run([sys.executable, "-m", "mtcore.export", "--to", "ctranslate2", str(ckpt.path), str(out),
                          "--quantization", "int8"], capture_output=True, text=True, env=ENV, timeout=300)
    assert run.returncode == 0, run.stderr
    assert f"-> {out} (ctranslate2, int8)" in run.stdout
    info = json.loads((out / "mtcore_export.json").read_text())
    assert info["quantization"] == "int8" and info["checkpoint"] == str(ckpt.path.resolve())  # found after a move
    assert ct2(out).translate_batch([["▁open"]], max_decoding_length=5)[0].hypotheses
    missing = subprocess.run([sys.executable, "-m", "mtcore.export", "--to", "hf", str(tmp_path / "nope"), str(out)],
                             capture_output=True, text=True, env=ENV, timeout=300)
    assert missing.returncode == 2 and "checkpoint directory not found" in missing.stderr


def test_mlflow_run_reference(ckpt, tmp_path, mlflow_uri):
    """runs:/RUN_ID means the run's best_checkpoint artifact, as training logs it."""
    import mlflow

    from mtcore.tracking.fetch import download_checkpoint

    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment("export")  # not the experiment id an earlier test left active in another store
    with mlflow.start_run() as run:
        mlflow.log_artifacts(str(ckpt.path), artifact_path="best_checkpoint")
    local = download_checkpoint(f"runs:/{run.info.run_id}")
    assert (local / "spm.model").is_file()
    # runs:/ID/translator of a run logged without its pyfunc model (the main job's reverse models): its checkpoint
    assert (download_checkpoint(f"runs:/{run.info.run_id}/translator") / "spm.model").is_file()
    assert main(["--to", "ctranslate2", f"runs:/{run.info.run_id}/best_checkpoint", str(tmp_path / "out")],
                resolve=download_checkpoint) == 0
    assert (tmp_path / "out" / "model.bin").is_file()


def test_every_model_command_takes_a_run_reference_and_leaves_no_download(ckpt, tmp_path, mlflow_uri, monkeypatch, capsys):
    """translate, evaluate and export take runs:/RUN_ID; the download is removed once read, and the export names
    the reference, not a temporary folder. A training run's folder means its best/."""
    import shutil
    import tempfile

    import mlflow

    from mtcore import evaluate as evaluate_entry, export as export_entry, translate as translate_entry

    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment("export")
    with mlflow.start_run() as run:
        mlflow.log_artifacts(str(ckpt.path), artifact_path="best_checkpoint")
    downloads = tmp_path / "tmp"
    downloads.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(downloads))
    uri = f"runs:/{run.info.run_id}"
    (tmp_path / "in.en").write_text("open the file\n", encoding="utf-8")
    assert translate_entry.main(["--model", uri, "-i", str(tmp_path / "in.en"), "-o", str(tmp_path / "a.vi")]) == 0
    assert export_entry.main(["--to", "ctranslate2", uri, str(tmp_path / "ct2")]) == 0
    assert json.loads((tmp_path / "ct2" / "mtcore_export.json").read_text())["checkpoint"] == uri
    (tmp_path / "test.tsv").write_text("open the file\tmở tệp\n", encoding="utf-8")
    assert evaluate_entry.main(["--model", uri, "--test", str(tmp_path / "test.tsv")]) == 0
    import pyarrow as pa

    from mtcore.data.corpus import write_parquet
    from mtcore.runs import MANIFEST

    stage = tmp_path / "clean-out"  # a stage folder: its kept/ pairs, not every Parquet file under it (rejects/ too)
    write_parquet(pa.table({"src": ["open the file"], "tgt": ["mở tệp"]}), stage / "kept" / "part-0.parquet")
    write_parquet(pa.table({"src": ["x"], "tgt": ["y"], "reason": ["empty"]}), stage / "rejects" / "part-0.parquet")
    (stage / MANIFEST).write_text("{}")
    assert evaluate_entry.main(["--model", uri, "--test", str(stage)]) == 0
    # every download removed (the logging set-up's file lands here when this test is the first to run an entry point)
    assert [p for p in downloads.iterdir() if not p.name.startswith("mtcore-ray-data-logging")] == []
    capsys.readouterr()
    for entry, extra in ((translate_entry, ["-i", str(tmp_path / "in.en")]), (evaluate_entry, ["--test", str(tmp_path / "test.tsv")])):
        assert entry.main(["--model", "runs:/0123456789abcdef", *extra]) == 2  # a mistyped run: one line, no traceback
        err = capsys.readouterr().err
        assert "runs:/0123456789abcdef" in err and "Traceback" not in err, err

    run_dir = tmp_path / "ray_train" / "my-run"
    shutil.copytree(ckpt.path, run_dir / "best")
    assert translate_entry.main(["--model", str(run_dir), "-i", str(tmp_path / "in.en"), "-o", str(tmp_path / "b.vi")]) == 0
    assert (tmp_path / "b.vi").read_text() == (tmp_path / "a.vi").read_text()
    import gzip

    for name in ("c.vi.gz", "C.VI.GZ"):  # -o OUT.gz is gzipped, as -i IN.gz is read (either case)
        assert translate_entry.main(["--model", str(run_dir), "-i", str(tmp_path / "in.en"), "-o", str(tmp_path / name)]) == 0
        with gzip.open(tmp_path / name, "rt", encoding="utf-8") as fh:
            assert fh.read() == (tmp_path / "a.vi").read_text()


def test_decode_speed_benchmark_runs(ckpt, capsys):
    """benchmarks/decode_speed.py with tiny settings: every runtime in the table, the goal line printed."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "decode_speed.py"
    spec = importlib.util.spec_from_file_location("decode_speed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--model", str(ckpt.path), "--n", "4", "--rounds", "1", "--beam", "2"]) == 0
    out = capsys.readouterr().out
    for row in ("| mtcore beam 2, KV cache |", "| CTranslate2 float32 beam 2 |", "| CTranslate2 int8 beam 2 |",
                "| HF generate beam 2 |"):
        assert row in out
    assert "the time of CTranslate2 float32: goal <= 2×" in out


def test_a_short_source_batched_with_a_long_one_stops_where_mtcore_stops(tokenizer, tmp_path):
    """The exports' helpers gave a batch the limit of its longest source, so a short sentence's greedy output ran on
    past mtcore's own limit for it (an untrained model decodes to the limit, which shows it)."""
    torch.manual_seed(1)
    model = build_model(ModelConfig.preset("tiny", dropout=0.0, vocab_size=tokenizer.vocab_size))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    path = save_checkpoint(tmp_path / "random", model, tokenizer)
    texts = ["Hi", "Open the file and save all of the changes to the disk before you quit the program please", "Ok"]
    ours = translate(load_checkpoint(path).model, tokenizer, texts, beam=1)
    assert len(ours[0]) < len(ours[1]) and len(ours[2]) < len(ours[1])
    assert translate_ctranslate2(ct2(to_ctranslate2(path, tmp_path / "ct2")), tokenizer, texts, beam=1,
                                 max_positions=POSITIONS) == ours
    assert translate_hf(hf(to_hf(path, tmp_path / "hf")), tokenizer, texts, beam=1) == ours


def test_ctranslate2_reads_the_exports_position_table(tokenizer, tmp_path):
    """translate_ctranslate2 assumed 1024 positions: a model of 64 failed on a long input inside CTranslate2
    ("No position encodings are defined for positions >= 64"). It now cuts sources where mtcore cuts them."""
    torch.manual_seed(0)
    model = build_model(ModelConfig.preset("tiny", dropout=0.0, vocab_size=tokenizer.vocab_size, max_positions=64))
    path = save_checkpoint(tmp_path / "short", model, tokenizer)
    out = to_ctranslate2(path, tmp_path / "ct2")
    texts = [" ".join(SOURCES[:12]), SOURCES[0]]  # the first is over 64 pieces
    assert len(tokenizer.encode(texts[:1])[0]) > 64
    theirs = translate_ctranslate2(ct2(out), Tokenizer(out / "spm.model"), texts, beam=1)
    assert theirs == translate(load_checkpoint(path).model, tokenizer, texts, beam=1)
    (out / "mtcore_export.json").unlink()
    with pytest.raises(ValueError, match="max_positions"):
        translate_ctranslate2(ct2(out), Tokenizer(out / "spm.model"), texts, beam=1)


def test_a_run_reference_without_a_store_names_where_it_looked_and_makes_none(tmp_path, monkeypatch):
    """`translate --model runs:/ID` from a folder that is not the workspace: it made an empty 1 MB mlflow.db there and
    said only "Run not found"."""
    from mtcore.tracking.fetch import FetchError, download_checkpoint

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "elsewhere"))
    with pytest.raises(FetchError, match=r"runs:/0123abcd/best_checkpoint: no MLflow store at .*elsewhere/mlflow.db; "
                                         r"run where you trained, or pass --home DIR"):
        download_checkpoint("runs:/0123abcd")
    assert not (tmp_path / "elsewhere" / "mlflow.db").exists()


def test_a_runs_test_decode_uses_its_length_penalty_and_bound(ckpt):
    """`train.len_penalty` and `train.max_len_a/b` reached the run's validation only: its test BLEU was decoded with
    the defaults whatever they said (and `train.len_penalty` changed the run's name and nothing else)."""
    from mtcore.tracking.artifacts import evaluate_checkpoint

    pairs = TRAIN[:12]
    default = evaluate_checkpoint(str(ckpt.path), pairs, 2, "cpu")
    bounded = evaluate_checkpoint(str(ckpt.path), pairs, 2, "cpu", max_len_a=0.01, max_len_b=2)
    assert max(len(ckpt.tokenizer.encode([h])[0]) for h in bounded["hyps"]) <= 2
    assert max(len(h.split()) for h in default["hyps"]) > 2 and bounded["test/bleu"] < default["test/bleu"]


def test_a_blank_source_is_translated_blank_on_every_path(ckpt):
    """The run's test decode (and validation, and back-translation) gave a blank source the model's invented text,
    where `mtcore.translate`/`mtcore.evaluate` give a blank line: two BLEU scores for one checkpoint and test set."""
    from mtcore.tracking.artifacts import evaluate_checkpoint

    alone = translate(ckpt.model, ckpt.tokenizer, [SOURCES[0]])
    assert translate(ckpt.model, ckpt.tokenizer, ["", SOURCES[0], " \u200b "]) == ["", alone[0], ""]
    assert evaluate_checkpoint(str(ckpt.path), [("", "Mở"), (SOURCES[0], "x")], 2, "cpu")["hyps"][0] == ""


def test_the_exported_helpers_give_a_blank_source_a_blank_translation(ckpt, ct2_dir, hf_dir, tokenizer):
    """translate_hf asked for "" or "   " made up a row of backslashes; every runtime now gives what mtcore gives."""
    texts = ["", SOURCES[0], "   ", "\u200b\u00ad", SOURCES[1], "\t\n"]
    ours = translate(ckpt.model, tokenizer, texts, beam=1)
    assert ours[0] == ours[2] == ours[3] == ours[5] == "" and ours[1] and ours[4]
    assert translate_hf(hf(hf_dir), tokenizer, texts, beam=1) == ours
    assert translate_ctranslate2(ct2(ct2_dir), Tokenizer(ct2_dir / "spm.model"), texts, beam=1) == ours
    assert translate_hf(hf(hf_dir), tokenizer, ["", " "], beam=2) == ["", ""]  # nothing to translate: no call at all


def test_ctranslate2_takes_sources_past_1024_tokens_as_mtcore_cut_them(tokenizer, tmp_path):
    """CTranslate2 cut every source at 1024 tokens by itself (`max_input_length`), after mtcore had cut it at the
    model's own position table: a model of 1200 positions read a shorter source through CTranslate2."""
    torch.manual_seed(1)
    model = build_model(ModelConfig.preset("tiny", dropout=0.0, vocab_size=tokenizer.vocab_size, max_positions=1200))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)  # an untrained model that reads its source: the last tokens change the output
    path = save_checkpoint(tmp_path / "long", model, tokenizer)
    texts = [" ".join(s for s, _ in toy_pairs(360)[:200]), SOURCES[0]]
    assert len(tokenizer.encode(texts[:1])[0]) > 1200
    out = to_ctranslate2(path, tmp_path / "ct2")
    ours = translate(load_checkpoint(path).model, tokenizer, texts, beam=1, max_len_a=0.01, max_len_b=8)
    assert translate_ctranslate2(ct2(out), Tokenizer(out / "spm.model"), texts, beam=1, max_len_a=0.01, max_len_b=8) == ours


def test_exports_decode_with_the_runs_length_penalty_and_bound(ckpt, tokenizer, tmp_path):
    """The HF generation config had DecodeConfig's length penalty whatever the run's was; the export's record now
    keeps the run's penalty and bound, which the helpers use unless told otherwise."""
    from mtcore.config import DecodeConfig

    run = save_checkpoint(tmp_path / "run", ckpt.model, tokenizer, step=150,
                          train_cfg=TrainConfig(len_penalty=1.3, max_len_a=0.5, max_len_b=2))
    hf_out, ct2_out = to_hf(run, tmp_path / "hf"), to_ctranslate2(run, tmp_path / "ct2")
    generation = hf(hf_out).generation_config
    assert (generation.length_penalty, generation.num_beams) == (1.3, 5)
    for out in (hf_out, ct2_out):
        record = json.loads((out / "mtcore_export.json").read_text())["decoding"]
        assert record == {"len_penalty": 1.3, "max_len_a": 0.5, "max_len_b": 2}  # no beam: the run's test beam is not kept
    runs = translate(ckpt.model, tokenizer, SOURCES, beam=1, max_len_a=0.5, max_len_b=2)
    assert runs != translate(ckpt.model, tokenizer, SOURCES, DecodeConfig(beam=1))  # the bound shows
    assert translate_hf(hf(hf_out), Tokenizer(hf_out / "spm.model"), SOURCES, beam=1) == runs
    assert translate_ctranslate2(ct2(ct2_out), Tokenizer(ct2_out / "spm.model"), SOURCES, beam=1) == runs
    told = translate(ckpt.model, tokenizer, SOURCES, beam=1, max_len_a=1.5, max_len_b=10)
    assert translate_hf(hf(hf_out), Tokenizer(hf_out / "spm.model"), SOURCES, beam=1, max_len_a=1.5, max_len_b=10) == told
    # a checkpoint without a `train` section, or a tokenizer not loaded from the export: DecodeConfig's
    default = hf(to_hf(ckpt.path, tmp_path / "plain")).generation_config.length_penalty
    assert default == DecodeConfig().len_penalty and to_hf(run, tmp_path / "told", len_penalty=0.0).name == "told"
    assert hf(tmp_path / "told").generation_config.length_penalty == 0.0
    assert translate_hf(hf(hf_out), tokenizer, SOURCES, beam=1) == translate(ckpt.model, tokenizer, SOURCES, beam=1)
