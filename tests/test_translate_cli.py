"""`python -m mtcore.translate`: -i/-o, --scores (mean log-prob per token, forced decoding) and --n-best."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from mtcore.config import ModelConfig, TrainConfig
from mtcore.nmt.checkpoint import load_checkpoint, save_checkpoint
from mtcore.nmt.decoding import encode_sources, nbest_ids, sequence_scores, translate, translate_ids
from mtcore.nmt.tokenizer import train_tokenizer
from mtcore.nmt.training import dev_loss, fit, toy_pairs
from mtcore.nmt.translate import main

torch.set_num_threads(1)
PAIRS = toy_pairs(64)
SOURCES = [s for s, _ in PAIRS[:6]] + ["completely unseen words here"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("tr")
    tok = train_tokenizer([s for p in toy_pairs(360) for s in p], root / "spm.model", vocab_size=500)
    cfg = TrainConfig(max_tokens=256, warmup=100, lr_scale=0.5, label_smoothing=0.0, max_epochs=1000, validate_every=0,
                      log_every=50, patience=0, dev_limit=8, max_len=64, max_steps=150)
    torch.manual_seed(0)
    result = fit(cfg, ModelConfig.preset("tiny", dropout=0.0), PAIRS, PAIRS, tok)
    return load_checkpoint(save_checkpoint(root / "ckpt", result.model, tok))


def test_input_output_files_and_scores(ckpt, tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    assert main(["--model", str(ckpt.path), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]) == 0
    plain = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert plain == translate(ckpt.model, ckpt.tokenizer, SOURCES, beam=5)

    assert main(["--model", str(ckpt.path), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "scored.txt"), "--scores"]) == 0
    rows = [line.split("\t") for line in (tmp_path / "scored.txt").read_text(encoding="utf-8").splitlines()]
    assert [t for _, t in rows] == plain
    scores = [float(s) for s, _ in rows]
    assert all(s <= 0 for s in scores)
    # The score is the model's mean log-probability per token of that output: what training's loss measures.
    src = encode_sources(ckpt.tokenizer, SOURCES[:1])
    hyp = translate_ids(ckpt.model, src, beam=5)
    nll, n = dev_loss(ckpt.model, [(src[0][:-1], hyp[0])], 4096, torch.device("cpu"), torch.autocast("cpu", enabled=False))
    assert scores[0] == pytest.approx(-nll / n, abs=1e-3)
    # Seen sentences are translated with more confidence than words the model never saw.
    assert max(scores[:6]) > scores[6]


def test_n_best_lists_the_beams_best_first(ckpt, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("\n".join(SOURCES[:3]) + "\n", encoding="utf-8")
    assert main(["--model", str(ckpt.path), "-i", str(tmp_path / "in.txt"), "--n-best", "3", "--beam", "4"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [int(i) for i, _, _ in rows] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    best = translate(ckpt.model, ckpt.tokenizer, SOURCES[:3], beam=4)
    assert all(b in [t for i, _, t in rows if int(i) == n] for n, b in enumerate(best))  # the beam's answer is listed
    for n in range(3):  # best score first (the scores printed were in the beam's order, which could rise)
        scores = [float(s) for i, s, _ in rows if int(i) == n]
        assert scores == sorted(scores, reverse=True)
    ids = nbest_ids(ckpt.model, encode_sources(ckpt.tokenizer, SOURCES[:1]), beam=4, n_best=3)[0]
    assert len({tuple(h) for h in ids}) == 3  # three different hypotheses
    assert sorted(float(s) for _, s, _ in rows[:3]) == pytest.approx(
        sorted(sequence_scores(ckpt.model, encode_sources(ckpt.tokenizer, SOURCES[:1]) * 3, ids)), abs=1e-3)
    assert [t for _, _, t in rows[:3]] == [t for _, t in sorted(zip(
        sequence_scores(ckpt.model, encode_sources(ckpt.tokenizer, SOURCES[:1]) * 3, ids), ckpt.tokenizer.decode(ids)),
        key=lambda r: -r[0])]


@pytest.mark.parametrize("argv, message", [
    (["--n-best", "5", "--beam", "4"], "--n-best: 5 needs beam search with --beam >= 5"),
    (["--sample", "--n-best", "2", "--beam", "2"], "--n-best: 2 lists a beam's hypotheses; leave out --sample"),
    (["-i", "/nonexistent/in.txt"], "-i/--input: /nonexistent/in.txt not found"),
    (["-o", "/nonexistent/typo/out.vi"], "-o/--output: /nonexistent/typo/out.vi: folder /nonexistent/typo does not exist"),
    (["--device", "cuda:99"], "--device: cuda:99"),  # no machine has 100 GPUs: the same error with CUDA or without
    (["--device", "gpu"], "--device: 'gpu' is not a device"),
    (["--max-len-a", "inf"], "--max-len-a: inf is not a finite number"),
    (["--max-len-a", "0"], "--max-len-a: 0.0 is out of range; pass a value > 0"),
    (["--sample", "--temperature", "nan"], "--temperature: nan is not a finite number"),
])
def test_bad_options_fail_in_one_line(ckpt, argv, message, capsys):
    assert main(["--model", str(ckpt.path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {message}"), err


def test_a_gzipped_input_is_read_and_utf16_is_named(ckpt, tmp_path, capsys):
    """`-i corpus.en.gz` as the corpus readers read it (it failed as "not UTF-8, byte 0x8b"); UTF-16 and an
    unnamed gzip file say what they are."""
    import gzip

    (tmp_path / "in.txt").write_text(SOURCES[0] + "\n", encoding="utf-8")
    (tmp_path / "in.txt.gz").write_bytes(gzip.compress((SOURCES[0] + "\n").encode()))
    for name in ("in.txt", "in.txt.gz"):
        assert main(["--model", str(ckpt.path), "-i", str(tmp_path / name), "-o", str(tmp_path / f"{name}.out")]) == 0
    assert (tmp_path / "in.txt.gz.out").read_text() == (tmp_path / "in.txt.out").read_text() != ""
    (tmp_path / "u16.txt").write_bytes((SOURCES[0] + "\n").encode("utf-16"))
    (tmp_path / "packed.txt").write_bytes(gzip.compress(b"x\n"))
    capsys.readouterr()
    (tmp_path / "mac.txt").write_bytes(f"{SOURCES[0]}\r{SOURCES[1]}\rQuit\r".encode())  # N sentences, one line
    for name, message in (("u16.txt", "UTF-16 text"), ("packed.txt", "gzip-compressed; name it *.gz"),
                          ("mac.txt", "mac.txt: its lines end in a bare carriage return")):
        assert main(["--model", str(ckpt.path), "-i", str(tmp_path / name)]) == 2
        assert message in capsys.readouterr().err


def test_blank_lines_stay_blank_and_every_translation_is_one_line(ckpt, tmp_path):
    """One output line per input line: a blank input line is a blank output line (a model asked to translate nothing
    invents text), and a translation's own line or cell breaks are escaped."""
    from mtcore.nmt.translate import one_cell

    lines = [SOURCES[0], "", "   ", SOURCES[1]]
    (tmp_path / "in.txt").write_bytes(("\ufeff" + "\n".join(lines[:4]) + "\n").encode("utf-8"))  # a BOM before line 1
    assert main(["--model", str(ckpt.path), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"), "--scores"]) == 0
    rows = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")[:-1]
    expected = translate(ckpt.model, ckpt.tokenizer, [SOURCES[0], SOURCES[1]], beam=5)
    assert [r.split("\t")[1] for r in rows] == [expected[0], "", "", expected[1]]
    assert [r.split("\t")[0] for r in rows][1:3] == ["nan", "nan"]  # no score, not the most confident one
    assert main(["--model", str(ckpt.path), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "nbest.txt"), "--n-best", "2"]) == 0
    nbest = [r.split("\t") for r in (tmp_path / "nbest.txt").read_text(encoding="utf-8").splitlines()]
    assert [int(r[0]) for r in nbest] == [0, 0, 1, 2, 3, 3] and [r[2] for r in nbest if r[0] in ("1", "2")] == ["", ""]
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    run = subprocess.run([sys.executable, "-m", "mtcore.translate", "--model", str(ckpt.path), "-i", "/dev/stdin"],
                         input=f"{SOURCES[0]}\n".encode(), capture_output=True, env=env, timeout=300)  # a pipe is a file to read
    assert run.returncode == 0 and run.stdout.decode().splitlines() == expected[:1], run.stderr
    assert one_cell("a\tb\r\nc\u2028d") == "a\\tb\\r\\nc d" and len(one_cell("x\x1dy").splitlines()) == 1


def test_a_long_input_shows_progress_and_ends_with_a_summary(ckpt, tmp_path, monkeypatch, capsys):
    """Chunks change no output (n-best line numbers stay the input's); progress and the summary go to stderr."""
    import argparse

    from mtcore.nmt import translate as translate_module

    lines = SOURCES * 3 + ["", SOURCES[0]]
    args = argparse.Namespace(**vars(translate_module.build_parser().parse_args(["--model", "x", "--n-best", "2"])))
    whole = translate_module.translate_lines(ckpt, lines, args)
    monkeypatch.setattr(translate_module, "CHUNK_LINES", 4)
    said: list[str] = []
    assert translate_module.translate_in_chunks(ckpt, lines, args, said.append, every_s=0.0) == whole
    assert said and said[0].startswith(f"translated 4 of {len(lines)} lines")
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["--model", str(ckpt.path), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]) == 0
    err = capsys.readouterr().err
    assert f"translated {len(lines) - 1} lines (1 blank) in " in err and f"→ {tmp_path / 'out.txt'}" in err


def test_sampling_draws_one_stream_over_the_chunks_and_output_comes_chunk_by_chunk(ckpt, tmp_path, monkeypatch):
    """Each chunk of 256 lines restarted the random stream from --seed: a line repeated to draw several samples got
    the same sample every 256 lines. The output was written only once every line was decoded."""
    import argparse

    from mtcore.nmt import translate as translate_module

    monkeypatch.setattr(translate_module, "CHUNK_LINES", 4)
    lines = [SOURCES[0]] * 8
    args = argparse.Namespace(**vars(translate_module.build_parser().parse_args(
        ["--model", "x", "--sample", "--temperature", "5", "--seed", "1"])))
    parts: list[list] = []
    rows = translate_module.translate_in_chunks(ckpt, lines, args, emit=parts.append)
    assert [len(p) for p in parts] == [4, 4] and parts[0] + parts[1] == rows
    assert parts[0] != parts[1]  # one stream: the second chunk's samples are new ones
    assert translate_module.translate_in_chunks(ckpt, lines, args) == rows  # and the same seed, the same samples
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["--model", str(ckpt.path), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"), "--sample",
                 "--temperature", "5", "--seed", "1"]) == 0
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == [translate_module.one_cell(r[0]) for r in rows]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]  # written as out.txt.partial, renamed


def test_lines_of_invisible_characters_are_blank_and_a_huge_length_limit_is_no_limit(ckpt, tmp_path):
    """A line of a zero-width space or a soft hyphen normalises to nothing: it was sent to the model, which invented
    a translation. --max-len-a 1e19 overflowed int64 into a negative limit: every output was empty."""
    (tmp_path / "in.txt").write_text(f"\u200b\n\u00ad \u2060\n{SOURCES[0]}\n", encoding="utf-8")
    assert main(["--model", str(ckpt.path), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"), "--scores"]) == 0
    rows = [r.split("\t") for r in (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()]
    assert rows[:2] == [["nan", ""], ["nan", ""]] and rows[2][1] == translate(ckpt.model, ckpt.tokenizer, SOURCES[:1], beam=5)[0]
    greedy = translate(ckpt.model, ckpt.tokenizer, SOURCES[:1], beam=1, max_len_a=100.0)
    assert greedy[0]
    for flag, value in (("--max-len-a", "1e19"), ("--max-len-b", str(2**63 - 1))):
        assert main(["--model", str(ckpt.path), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "big.txt"), "--beam", "1",
                     flag, value]) == 0
        assert (tmp_path / "big.txt").read_text(encoding="utf-8").splitlines()[2] == greedy[0]


def test_translations_reach_a_stdout_that_is_not_utf8(ckpt):
    """Under a C or Latin-1 locale (PYTHONIOENCODING=latin-1 here) writing Vietnamese to stdout was a traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    expected = translate(ckpt.model, ckpt.tokenizer, SOURCES[:2], beam=5)
    assert any(ord(c) > 255 for c in "".join(expected))  # the toy model writes Vietnamese letters Latin-1 lacks
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "PYTHONIOENCODING": "latin-1"}
    run = subprocess.run([sys.executable, "-m", "mtcore.translate", "--model", str(ckpt.path)], capture_output=True,
                         input="\n".join(SOURCES[:2]).encode(), env=env, timeout=300)
    assert run.returncode == 0 and run.stdout.decode("utf-8").splitlines() == expected, run.stderr


def test_a_reader_that_stops_early_ends_translate_quietly(ckpt):
    """`translate … | head -1`: when stdout's reader has gone, translate stops without a message (exit 141, as a
    tool killed by SIGPIPE), not with `error: Broken pipe`."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first translation is written
    run = subprocess.run([sys.executable, "-m", "mtcore.translate", "--model", str(ckpt.path)], stdout=write_end,
                         input="\n".join(SOURCES * 20).encode(), stderr=subprocess.PIPE, env=env, timeout=300)
    os.close(write_end)
    assert run.returncode == 141 and run.stderr.decode().strip() == "", run.stderr


def test_an_over_long_line_is_named_by_its_input_line_and_a_too_wide_beam_is_refused(ckpt, tmp_path, caplog, capsys):
    """The warning counted sources after blank lines were set aside (line 3 was "source 1"); a beam wider than half
    the vocabulary failed inside beam search with a traceback."""
    long_line = " ".join(f"word{i}" for i in range(1500))
    (tmp_path / "in.txt").write_text(f"\n{SOURCES[0]}\n{long_line}\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="mtcore.nmt.decoding"):
        assert main(["--model", str(ckpt.path), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"), "--beam", "1"]) == 0
    assert "input line 3 has" in caplog.text and "cut to" in caplog.text
    vocab = ckpt.model.cfg.vocab_size
    assert main(["--model", str(ckpt.path), "-i", str(tmp_path / "in.txt"), "--beam", str(vocab)]) == 2
    assert (f"--beam {vocab}: this model's vocabulary of {vocab} tokens allows a beam of at most {vocab // 2}"
            in capsys.readouterr().err)


# --------------------------------------------------------------------------- the run's decoding settings


RUN_TRAIN = TrainConfig(len_penalty=1.3, max_len_a=0.5, max_len_b=2)  # not DecodeConfig's 0.7, 1.5, 10: a bound that bites


@pytest.fixture(scope="module")
def run_ckpt(ckpt, tmp_path_factory):
    """The trained model saved as a run saves it: with its `train` section."""
    return load_checkpoint(save_checkpoint(tmp_path_factory.mktemp("run") / "best", ckpt.model, ckpt.tokenizer,
                                           train_cfg=RUN_TRAIN, step=150))


def test_translate_decodes_with_the_runs_length_penalty_and_bound_unless_told(run_ckpt, tmp_path, capsys):
    """translate and evaluate decoded with DecodeConfig's 0.7, 1.5 and 10 whatever the run had decoded its test set
    with (`train.len_penalty`, `train.max_len_a/b`). The beam stays the command line's: the checkpoint does not keep
    the run's `job.test_beam` (`train.beam` is validation's)."""
    from mtcore.config import DecodeConfig

    (tmp_path / "in.txt").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    runs = DecodeConfig(beam=5, len_penalty=1.3, max_len_a=0.5, max_len_b=2)
    expected = translate(run_ckpt.model, run_ckpt.tokenizer, SOURCES, runs)
    assert expected != translate(run_ckpt.model, run_ckpt.tokenizer, SOURCES, DecodeConfig())  # the bound shows
    capsys.readouterr()
    assert main(["--model", str(run_ckpt.path), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]) == 0
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == expected
    assert ("; beam 5, len_penalty 1.3, max_len_a 0.5, max_len_b 2 (len_penalty, max_len_a, max_len_b: the run's train "
            "settings)") in capsys.readouterr().err
    # a flag given is the flag's; the others stay the run's
    assert main(["--model", str(run_ckpt.path), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "told.txt"),
                 "--max-len-a", "1.5", "--max-len-b", "10", "--beam", "2"]) == 0
    told = runs.replace(beam=2, max_len_a=1.5, max_len_b=10)
    assert (tmp_path / "told.txt").read_text(encoding="utf-8").splitlines() == translate(
        run_ckpt.model, run_ckpt.tokenizer, SOURCES, told) != expected
    assert "; beam 2, len_penalty 1.3, max_len_a 1.5, max_len_b 10 (len_penalty: the run's train settings)" in capsys.readouterr().err


def test_evaluate_reports_and_uses_the_runs_decoding_settings(ckpt, run_ckpt, tmp_path, capsys):
    from mtcore.config import DecodeConfig
    from mtcore.nmt import evaluate as evaluate_module
    from mtcore.nmt.metrics import corpus_bleu

    pairs = PAIRS[:12]
    (tmp_path / "test.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    refs = [t for _, t in pairs]

    def evaluated(model_dir, *flags) -> tuple[str, float]:
        assert evaluate_module.main(["--model", str(model_dir), "--test", str(tmp_path / "test.tsv"), "--samples", "0",
                                     "--device", "cpu", *flags]) == 0
        lines = capsys.readouterr().out.splitlines()
        return (next(line for line in lines if line.startswith("decoding ")).split(None, 1)[1],
                float(next(line for line in lines if line.startswith("BLEU ")).split()[1]))

    def bleu_of(decode: DecodeConfig) -> float:
        return round(corpus_bleu(translate(ckpt.model, ckpt.tokenizer, [s for s, _ in pairs], decode), refs).score, 2)

    runs = DecodeConfig(len_penalty=1.3, max_len_a=0.5, max_len_b=2)
    assert bleu_of(runs) != bleu_of(DecodeConfig())
    assert evaluated(run_ckpt.path) == ("beam 5, len_penalty 1.3, max_len_a 0.5, max_len_b 2 (len_penalty, max_len_a, "
                                        "max_len_b: the run's train settings)", bleu_of(runs))
    assert evaluated(run_ckpt.path, "--len-penalty", "0.2", "--max-len-a", "1.5") == (
        "beam 5, len_penalty 0.2, max_len_a 1.5, max_len_b 2 (max_len_b: the run's train settings)",
        bleu_of(runs.replace(len_penalty=0.2, max_len_a=1.5)))
    assert evaluated(ckpt.path) == ("beam 5, len_penalty 0.7, max_len_a 1.5, max_len_b 10", bleu_of(DecodeConfig()))
    assert evaluated(run_ckpt.path, "--sample", "--seed", "2")[0] == (
        "sampled (temperature 1.0, top-k 0, top-p 1.0, seed 2), max_len_a 0.5, max_len_b 2 (max_len_a, max_len_b: the "
        "run's train settings)")


# --------------------------------------------------------------------------- the MLflow pyfunc model


def test_the_logged_translator_decodes_as_the_run_did(run_ckpt, tmp_path, mlflow_uri):
    """The pyfunc model's params defaulted to DecodeConfig's (and MLflow fills every param left out from the logged
    schema's defaults): the run's length penalty and bound are the logged model's defaults."""
    import mlflow

    from mtcore.config import DecodeConfig
    from mtcore.tracking.pyfunc import log_translator

    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment("pyfunc")
    with mlflow.start_run() as run:
        log_translator(run_ckpt.path)
    model = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/translator")
    defaults = {p.name: p.default for p in model.metadata.get_params_schema().params}
    assert defaults == {"beam": 5, "len_penalty": 1.3, "max_len_a": 0.5, "max_len_b": 2, "batch_size": 32}
    runs = DecodeConfig(len_penalty=1.3, max_len_a=0.5, max_len_b=2)
    texts = SOURCES[:4]
    assert model.predict(texts) == translate(run_ckpt.model, run_ckpt.tokenizer, texts, runs)
    assert model.predict(texts, params={"max_len_a": 1.5, "max_len_b": 10}) == translate(
        run_ckpt.model, run_ckpt.tokenizer, texts, runs.replace(max_len_a=1.5, max_len_b=10))
    assert model.predict(texts) != model.predict(texts, params={"max_len_a": 1.5, "max_len_b": 10})


def test_the_translator_loaded_by_itself_takes_the_runs_settings_too(run_ckpt):
    """Without MLflow's schema (a `Translator` loaded directly): params left out are the run's, not DecodeConfig's."""
    import types

    from mtcore.config import DecodeConfig
    from mtcore.tracking.pyfunc import ARTIFACT, Translator

    translator = Translator()
    translator.load_context(types.SimpleNamespace(artifacts={ARTIFACT: str(run_ckpt.path)}))
    runs = DecodeConfig(len_penalty=1.3, max_len_a=0.5, max_len_b=2)
    assert translator.predict(None, SOURCES[:3]) == translate(run_ckpt.model, run_ckpt.tokenizer, SOURCES[:3], runs)
    assert translator.predict(None, SOURCES[:3], params={"beam": "1"}) == translate(
        run_ckpt.model, run_ckpt.tokenizer, SOURCES[:3], runs.replace(beam=1))


@pytest.mark.parametrize("model_input, expected", [
    (pd.DataFrame({"src": ["Open the file", pd.NA, None, np.nan, "  "]}, dtype="object"),
     ["Open the file", "", "", "", "  "]),  # pd.NA was the text "<NA>", translated
    (pd.DataFrame({"src": pd.array(["Open", pd.NA], dtype="string")}), ["Open", ""]),
    (pd.DataFrame({"id": [7, 8], "src": ["a", "b"]}), ["a", "b"]),
    (pd.DataFrame({"text": ["a", None]}), ["a", ""]),  # one column, whatever its name
    (pd.Series(["a", pd.NA], dtype="string"), ["a", ""]),
    ("Open the file", ["Open the file"]),  # one string is one text, not a list of its characters
    (["a", None, float("nan")], ["a", "", ""]),
])
def test_pyfunc_input_texts(model_input, expected):
    from mtcore.tracking.pyfunc import _texts

    assert _texts(model_input) == expected


def test_pyfunc_input_of_several_columns_without_src_is_refused_naming_them(run_ckpt):
    """With columns `id,text` the ids were translated."""
    import types

    from mtcore.tracking.pyfunc import ARTIFACT, Translator, _texts

    with pytest.raises(ValueError, match=r"columns \['id', 'text'\]; name the column of sources `src`"):
        _texts(pd.DataFrame({"id": ["1", "2"], "text": ["Open the file", "Quit"]}))
    translator = Translator()
    translator.load_context(types.SimpleNamespace(artifacts={ARTIFACT: str(run_ckpt.path)}))
    frame = pd.DataFrame({"src": pd.array([SOURCES[0], pd.NA, ""], dtype="string")})
    out = translator.predict(None, frame, params={"beam": 1})
    assert out[1:] == ["", ""] and out[0] == translator.predict(None, [SOURCES[0]], params={"beam": 1})[0] != ""


def test_evaluate_warns_when_the_references_are_in_another_language(ckpt, tmp_path, caplog):
    """An en-de model scored against Vietnamese references printed BLEU 0.00 and nothing else."""
    from mtcore.nmt import evaluate as evaluate_module

    german = ["Die Datei kann nicht geöffnet werden", "Das Fenster ist sehr groß", "Wo ist der neue Ordner",
              "Ich sehe ein kleines Haus", "Der Lehrer ist nicht hier", "Speichern Sie die Datei bitte jetzt"]
    (tmp_path / "de.tsv").write_text("".join(f"{s}\t{t}\n" for (s, _), t in zip(PAIRS, german)), encoding="utf-8")
    (tmp_path / "vi.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS[:6]), encoding="utf-8")
    for name, warned in (("de.tsv", True), ("vi.tsv", False)):
        caplog.clear()
        with caplog.at_level("WARNING"):
            assert evaluate_module.main(["--model", str(ckpt.path), "--test", str(tmp_path / name), "--samples", "0",
                                         "--device", "cpu"]) == 0
        assert ("its references read as de, not vi" in caplog.text) is warned, caplog.text
