"""Checkpoints: one directory translates; mismatches fail with messages naming them; averaging; the CLIs."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pyarrow as pa
import pytest
import torch

from mtcore.nmt.checkpoint import (
    CheckpointError,
    average_checkpoints,
    last_checkpoints,
    load_checkpoint,
    load_train_state,
    load_weights,
    save_checkpoint,
)
from mtcore.config import ModelConfig, TrainConfig
from mtcore.data.corpus import write_parquet
from mtcore.nmt.decoding import translate
from mtcore.nmt.model import build_model
from mtcore.nmt.tokenizer import train_tokenizer
from mtcore.nmt.training import toy_pairs

torch.set_num_threads(1)
PAIRS = toy_pairs(40)
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # subprocesses: no OpenMP spinning on a shared machine
SOURCES = [s for s, _ in PAIRS[:6]]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer([s for p in PAIRS for s in p], tmp_path_factory.mktemp("spm") / "spm.model", vocab_size=400)


def tiny_model(tokenizer, seed=0, **kw):
    torch.manual_seed(seed)
    return build_model(ModelConfig.preset("tiny", **kw), vocab_size=tokenizer.vocab_size).eval()


def test_round_trip_translates_identically(tokenizer, tmp_path):
    model = tiny_model(tokenizer)
    before = translate(model, tokenizer, SOURCES, beam=3, max_len_b=5)
    save_checkpoint(tmp_path / "ckpt", model, tokenizer, train_cfg=TrainConfig(warmup=10), step=7, metrics={"dev/bleu": 1.5})
    ckpt = load_checkpoint(tmp_path / "ckpt")
    assert translate(ckpt.model, ckpt.tokenizer, SOURCES, beam=3, max_len_b=5) == before
    assert ckpt.model_cfg == model.cfg and ckpt.train_cfg.warmup == 10
    meta = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert (meta["model"]["src_lang"], meta["model"]["tgt_lang"], meta["step"]) == ("en", "vi", 7)
    assert meta["tokenizer"]["vocab_size"] == tokenizer.vocab_size and len(meta["tokenizer"]["sha256"]) == 64
    assert (tmp_path / "ckpt" / "spm.model").read_bytes() == tokenizer.model_bytes()


def test_another_vocabulary_fails_clearly(tokenizer, tmp_path):
    save_checkpoint(tmp_path / "ckpt", tiny_model(tokenizer), tokenizer)
    other = train_tokenizer(["hoàn toàn khác", "something else entirely"] * 10, tmp_path / "other.model", vocab_size=300)
    with pytest.raises(CheckpointError, match="is not the one this checkpoint was trained with"):
        load_checkpoint(tmp_path / "ckpt", tokenizer=other)
    (tmp_path / "ckpt" / "spm.model").write_bytes(other.model_bytes())  # the directory's own model swapped
    with pytest.raises(CheckpointError, match=r"spm.model.*sha256"):
        load_checkpoint(tmp_path / "ckpt")


def test_weights_of_another_shape_name_the_parameter(tokenizer):
    state = tiny_model(tokenizer).state_dict()
    wider = build_model(ModelConfig.preset("tiny", d_ff=128), vocab_size=tokenizer.vocab_size)
    with pytest.raises(CheckpointError, match=r"`encoder.0.ff.w1.weight` has shape \(256, 64\) in the checkpoint but \(128, 64\)"):
        load_weights(wider, state)
    with pytest.raises(CheckpointError, match=r"`embed.weight` has shape"):
        load_weights(build_model(ModelConfig.preset("tiny"), vocab_size=tokenizer.vocab_size + 8), state)
    with pytest.raises(CheckpointError, match="missing"):
        load_weights(build_model(ModelConfig.preset("tiny", layers=3), vocab_size=tokenizer.vocab_size), state)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint directory \\(missing config.json\\)"):
        load_checkpoint(tmp_path)


def test_average_of_last_checkpoints(tokenizer, tmp_path):
    models = [tiny_model(tokenizer, seed=s) for s in range(3)]
    for step, m in zip((10, 20, 30), models):
        save_checkpoint(tmp_path / "run" / f"step_{step}", m, tokenizer, step=step)
    import shutil

    shutil.copytree(tmp_path / "run" / "step_30", tmp_path / "run" / "best")  # what a run publishes: a copy of one
    last2 = last_checkpoints(tmp_path / "run", 2)
    assert [p.name for p in last2] == ["step_20", "step_30"]
    assert [p.name for p in last_checkpoints(tmp_path / "run", 5)] == ["step_10", "step_20", "step_30"]
    avg = average_checkpoints(last2, out_dir=tmp_path / "avg")
    w = "decoder.1.cross_attn.q_proj.weight"
    torch.testing.assert_close(avg.model.state_dict()[w], (models[1].state_dict()[w] + models[2].state_dict()[w]) / 2)
    assert load_checkpoint(tmp_path / "avg").meta["metrics"]["averaged_from"] == [str(p) for p in last2]
    save_checkpoint(tmp_path / "odd", tiny_model(tokenizer, heads=2), tokenizer, step=40)
    with pytest.raises(CheckpointError, match=r"model config differs .* in \['heads'\]"):
        average_checkpoints([tmp_path / "run" / "step_30", tmp_path / "odd"])


def test_translate_and_evaluate_cli(tokenizer, tmp_path):
    model = tiny_model(tokenizer)
    save_checkpoint(tmp_path / "ckpt", model, tokenizer)
    expected = translate(model, tokenizer, SOURCES, beam=2, max_len_b=5)
    run = subprocess.run(
        [sys.executable, "-m", "mtcore.nmt.translate", "--model", str(tmp_path / "ckpt"), "--beam", "2", "--max-len-b", "5",
         "--batch-size", "4", "--device", "cpu"],
        input="\n".join(SOURCES) + "\n", capture_output=True, text=True, check=True, timeout=120, env=ENV,
    )
    assert run.stdout.split("\n")[:-1] == expected
    test = write_parquet(pa.table({"src": [s for s, _ in PAIRS[:5]], "tgt": [t for _, t in PAIRS[:5]],
                                   "origin": ["toy"] * 5, "id": [str(i) for i in range(5)]}), tmp_path / "test.parquet")
    run = subprocess.run(
        [sys.executable, "-m", "mtcore.nmt.evaluate", "--model", str(tmp_path / "ckpt"), "--test", str(test), "--beam", "1",
         "--max-len-b", "3", "--limit", "3", "--device", "cpu"],
        capture_output=True, text=True, check=True, timeout=120, env=ENV,
    )
    assert "BLEU" in run.stdout and "nrefs:1|case:mixed" in run.stdout and "(3 pairs)" in run.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "mtcore.nmt.evaluate", "--model", str(tmp_path / "ckpt"), "--test", str(test), "--reverse"],
        capture_output=True, text=True, timeout=120, env=ENV,
    )
    assert bad.returncode != 0 and "the model translates en-vi, not vi-en" in bad.stderr


def test_evaluate_shows_progress_and_scores_as_one_batch(tokenizer, tmp_path, monkeypatch, capsys):
    """A long test set shows progress on stderr; decoding it in chunks changes no hypothesis, so no score."""
    import functools

    from mtcore.nmt import evaluate as evaluate_module
    from mtcore.nmt import translate as translate_module

    save_checkpoint(tmp_path / "ckpt", tiny_model(tokenizer), tokenizer)
    test = write_parquet(pa.table({"src": [s for s, _ in PAIRS[:5]], "tgt": [t for _, t in PAIRS[:5]]}), tmp_path / "t.parquet")
    argv = ["--model", str(tmp_path / "ckpt"), "--test", str(test), "--beam", "2", "--max-len-b", "4", "--device", "cpu"]
    assert evaluate_module.main(argv) == 0
    whole = capsys.readouterr()
    monkeypatch.setattr(translate_module, "CHUNK_LINES", 2)
    monkeypatch.setattr(evaluate_module, "in_chunks", functools.partial(translate_module.in_chunks, every_s=0.0))
    assert evaluate_module.main(argv) == 0
    chunked = capsys.readouterr()
    assert "translated 2 of 5 pairs" in chunked.err and "translated" not in whole.err
    drop_speed = lambda out: [line for line in out.splitlines() if "sentences/s" not in line]  # noqa: E731
    assert drop_speed(chunked.out) == drop_speed(whole.out) and "BLEU" in whole.out
    assert "beam 2" in whole.out
    assert evaluate_module.main(argv + ["--sample", "--top-k", "5", "--seed", "3"]) == 0  # it said "beam 5" when sampling
    assert "sampled (temperature 1.0, top-k 5, top-p 1.0, seed 3)" in capsys.readouterr().out


def test_manifest_names_a_damaged_file_and_resume_falls_back(tokenizer, tmp_path, caplog):
    """config.json holds every file's sha256; a damaged latest checkpoint is reported and the previous good one used."""
    from mtcore.nmt.checkpoint import load_resume_state

    model = tiny_model(tokenizer)
    for step in (10, 20):
        save_checkpoint(tmp_path / "run" / f"checkpoint_{step}", model, tokenizer, step=step,
                        train_state={"step": step, "epoch": 0})
    latest = tmp_path / "run" / "checkpoint_20"
    assert set(json.loads((latest / "config.json").read_text())["files"]) == {"model.pt", "spm.model", "train_state.pt"}
    assert not list((tmp_path / "run").glob(".*"))  # the temp directory was renamed into place, nothing left beside it
    state, used = load_resume_state(latest)
    assert used == latest and state["step"] == 20
    data = (latest / "train_state.pt").read_bytes()
    (latest / "train_state.pt").write_bytes(data[: len(data) // 2])  # a crash mid-copy
    state, used = load_resume_state(latest)
    assert used == tmp_path / "run" / "checkpoint_10" and state["step"] == 10
    assert "train_state.pt: damaged" in caplog.text
    with pytest.raises(CheckpointError, match=r"checkpoint_20/train_state.pt: damaged"):
        load_train_state(latest)
    (tmp_path / "run" / "checkpoint_10" / "model.pt").write_bytes(b"\0" * 10)
    with pytest.raises(CheckpointError, match="no checkpoint of this run can be resumed"):
        load_resume_state(latest)


def test_foreign_and_damaged_directories_say_what_they_are(tokenizer, tmp_path):
    from mtcore.embedding.encoder import DualEncoder, EncoderConfig, save_encoder

    enc = save_encoder(DualEncoder(EncoderConfig(vocab_size=tokenizer.vocab_size, d_model=32, dim=32)), tokenizer.model_bytes(),
                       tmp_path / "enc")
    with pytest.raises(CheckpointError, match="sentence-encoder directory"):
        load_checkpoint(enc)
    save_checkpoint(tmp_path / "ckpt", tiny_model(tokenizer), tokenizer)
    meta = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    del meta["files"]  # written before the manifest existed: torch's own error must still become one named line
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(meta))
    # Random bytes reach torch's unpickler as many exception types (IndexError, KeyError, ...): try a
    # fixed spread of them, so the test is the same on every run and covers more than one.
    for seed in range(50):
        (tmp_path / "ckpt" / "model.pt").write_bytes(random.Random(seed).randbytes(1000))
        with pytest.raises(CheckpointError, match=r"ckpt/model.pt: damaged or not a PyTorch file"):
            load_checkpoint(tmp_path / "ckpt")


def test_a_config_from_a_newer_version_names_the_file_and_the_version(tokenizer, tmp_path):
    save_checkpoint(tmp_path / "ckpt", tiny_model(tokenizer), tokenizer)
    path = tmp_path / "ckpt" / "config.json"
    meta = json.loads(path.read_text())
    meta["model"]["rope_theta"] = 10000  # a key this version does not know
    meta["mtcore_version"] = "9.9.9"
    path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"ckpt/config.json: unknown `model` key\(s\) \['rope_theta'\].*written by mtcore 9.9.9"):
        load_checkpoint(tmp_path / "ckpt")


def test_evaluate_gives_a_blank_source_a_blank_hypothesis(tokenizer, tmp_path, caplog, capsys):
    """As translate does: asked for a blank line, a model invents text ("rrrrrrrrrr"), which was scored."""
    from mtcore.nmt import evaluate as evaluate_module
    from mtcore.nmt.decoding import translate

    ckpt = save_checkpoint(tmp_path / "ckpt", tiny_model(tokenizer), tokenizer)
    from mtcore.nmt.decoding import encode_sources, translate_ids

    model = tiny_model(tokenizer)
    assert tokenizer.decode(translate_ids(model, encode_sources(tokenizer, [" "])))[0].strip()  # what it would have scored
    assert translate(model, tokenizer, [" "]) == [""]  # every path gives it a blank hypothesis now
    src = [s for s, _ in PAIRS[:4]]
    src[1] = "  "
    test = write_parquet(pa.table({"src": src, "tgt": [t for _, t in PAIRS[:4]]}), tmp_path / "t.parquet")
    argv = ["--model", str(ckpt), "--test", str(test), "--samples", "4", "--device", "cpu"]
    with caplog.at_level("WARNING"):
        assert evaluate_module.main(argv) == 0
    assert "1 of 4 sources are blank (first: pair 2); their hypotheses are blank" in caplog.text
    out = capsys.readouterr().out
    assert "\nSRC    \nHYP  \n" in out  # the blank source's hypothesis is empty


# --------------------------------------------------------------------------- averaging only weights of one model


def _t(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


@pytest.mark.parametrize("states, message", [
    # {'w': 2, 'old': 9} and {'w': 4, 'new': 6} averaged to {'w': 3, 'new': 3}
    ([{"w": _t(2.0), "old": _t(9.0)}, {"w": _t(4.0), "new": _t(6.0)}],
     "weights 2: parameter `new` is not in weights 1"),
    ([{"w": _t(2.0), "b": _t(1.0)}, {"w": _t(4.0)}], "weights 2: parameter `b` of weights 1 is missing"),
    ([{"w": _t(2.0)}, {"w": _t(4.0)}, {"w": _t(4.0), "x": _t(0.0)}], "weights 3: parameter `x` is not in weights 1"),
    ([{"w": torch.ones(1, 3)}, {"w": torch.ones(2, 3)}],
     r"weights 2: parameter `w` has shape \(2, 3\), \(1, 3\) in weights 1"),
    ([{"w": torch.ones(3)}, {"w": torch.ones(1)}], r"weights 2: parameter `w` has shape \(1,\), \(3,\) in weights 1"),
])
def test_mean_state_refuses_weights_of_another_model(states, message):
    from mtcore.nmt.averaging import mean_state

    with pytest.raises(ValueError, match=message):
        mean_state(states)


def test_mean_state_names_the_weights_at_fault_and_averages_alike_ones():
    from mtcore.nmt.averaging import WeightSnapshots, mean_state

    with pytest.raises(ValueError, match="run/step_20: parameter `new` is not in run/step_10"):
        mean_state([{"w": _t(2.0), "old": _t(9.0)}, {"w": _t(4.0), "new": _t(6.0)}],
                   names=["run/step_10", "run/step_20"])
    snapshots = WeightSnapshots(keep=3, every=10)
    snapshots.items.extend([(10, {"w": _t(2.0)}), (20, {"w": _t(4.0, 5.0)})])
    with pytest.raises(ValueError, match=r"the snapshot of step 20: parameter `w` has shape \(2,\), \(1,\) in the "
                                         r"snapshot of step 10"):
        snapshots.mean()
    mean = mean_state([{"w": _t(2.0), "n": torch.tensor(1)}, {"w": _t(4.0), "n": torch.tensor(2)}])
    assert mean["w"].tolist() == [3.0] and mean["n"].item() == 2  # a counter is the last one's, as before


def test_a_checkpoint_given_twice_is_refused(tmp_path):
    from mtcore.nmt.averaging import distinct_checkpoints

    (tmp_path / "run" / "step_10").mkdir(parents=True)
    (tmp_path / "run" / "step_20").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "run" / "step_10")
    distinct_checkpoints([tmp_path / "run" / "step_10", tmp_path / "run" / "step_20"])
    for again in (tmp_path / "run" / "step_20" / ".." / "step_10", tmp_path / "link", str(tmp_path / "run" / "step_10")):
        with pytest.raises(ValueError, match=f"{again}: the same checkpoint as {tmp_path / 'run' / 'step_10'}, given twice"):
            distinct_checkpoints([tmp_path / "run" / "step_10", tmp_path / "run" / "step_20", again])


def test_average_checkpoints_refuses_weights_whose_names_differ(tokenizer, tmp_path):
    """Two checkpoints of one config whose parameter names differ (another mtcore version): the mean silently kept the
    last one's names and divided a parameter of one of them by two."""
    for step in (10, 20):
        save_checkpoint(tmp_path / f"step_{step}", tiny_model(tokenizer, seed=step), tokenizer, step=step)
    state = torch.load(tmp_path / "step_10" / "model.pt", weights_only=True)
    state["decoder.1.cross_attn.query.weight"] = state.pop("decoder.1.cross_attn.q_proj.weight")  # a renamed module
    torch.save(state, tmp_path / "step_10" / "model.pt")
    with pytest.raises(ValueError, match="parameter `decoder.1.cross_attn.q_proj.weight` is not in"):
        average_checkpoints([tmp_path / "step_10", tmp_path / "step_20"])


def test_average_checkpoints_refuses_one_checkpoint_twice_and_names_the_one_at_fault(tokenizer, tmp_path):
    for step in (10, 20):
        save_checkpoint(tmp_path / f"step_{step}", tiny_model(tokenizer, seed=step), tokenizer, step=step)
    twice = f"{tmp_path / 'step_20'}: the same checkpoint as {tmp_path / 'step_20'}, given twice"
    with pytest.raises(ValueError, match=twice):
        average_checkpoints([tmp_path / "step_10", tmp_path / "step_20", tmp_path / "step_20"])
    state = torch.load(tmp_path / "step_10" / "model.pt", weights_only=True)
    state["decoder.1.cross_attn.query.weight"] = state.pop("decoder.1.cross_attn.q_proj.weight")
    torch.save(state, tmp_path / "step_10" / "model.pt")
    with pytest.raises(ValueError, match=f"{tmp_path / 'step_20'}: parameter `decoder.1.cross_attn.q_proj.weight` is not "
                                         f"in {tmp_path / 'step_10'}"):
        average_checkpoints([tmp_path / "step_10", tmp_path / "step_20"])
