"""The bad-input catalogue (issue 18): every command-line tool, given a mistake a new user makes,
exits with code 2 and one line `error: <culprit>: ...` on stderr, prints no traceback, and leaves
no half-made output and no RUNNING MLflow run behind.

Each row runs the real command in a subprocess with tiny inputs. Most rows fail before Ray
starts, so the cost is Python's imports; the rows run a few at a time, once per session.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parent.parent
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0  # root writes anywhere: no read-only case


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]  # a script path or "-m module", then options; {name} = a path of the kit
    culprit: str  # the error line must name this
    stdin: bytes = b""
    absent: str | None = None  # a kit path the command must not have created


def case(id_, cmd, *args, culprit, stdin=b"", absent=None):
    return Case(id_, (*cmd.split(), *args), culprit, stdin, absent)


T, E = "-m mtcore.translate", "-m mtcore.evaluate"
CLEAN, ALIGN, DOCS, ENC = "pipelines/clean.py", "pipelines/align_filter.py", "pipelines/align_docs.py", "pipelines/train_encoder.py"
BT, TRAIN, TUNE = "pipelines/backtranslate.py", "experiments/train_transformer.py", "experiments/tune_transformer.py"
REPORT, UI = "-m mtcore.report", "-m mtcore.ui"

CATALOGUE = [
    # --- the rows of issue 18 that failed before
    case("translate-truncated-weights", T, "--model", "{ckpt_truncated}", culprit="model.pt", stdin=b"hello\n"),
    case("translate-random-weights", T, "--model", "{ckpt_random}", culprit="model.pt", stdin=b"hello\n"),
    case("translate-encoder-dir", T, "--model", "{encoder}", culprit="sentence-encoder", stdin=b"hello\n"),
    case("translate-invalid-utf8-stdin", T, "--model", "{ckpt}", culprit="stdin line 2", stdin=b"open the file\n\xff\xfe\n"),
    case("evaluate-beam-0", E, "--model", "{ckpt}", "--test", "{test}", "--beam", "0", culprit="--beam"),
    case("evaluate-limit-negative", E, "--model", "{ckpt}", "--test", "{test}", "--limit", "-3", culprit="--limit"),
    case("align-docs-max-size-0", DOCS, "--src", "{doc_en}", "--tgt", "{doc_vi}", "--output", "{new_out}/a.tsv", "--max-size", "0",
         culprit="--max-size", absent="new_out"),
    case("align-docs-del-factor-negative", DOCS, "--src", "{doc_en}", "--tgt", "{doc_vi}", "--output", "{new_out}/a.tsv",
         "--del-factor", "-5", culprit="--del-factor", absent="new_out"),
    case("align-docs-encoder-not-an-encoder", DOCS, "--src", "{doc_en}", "--tgt", "{doc_vi}", "--output", "{new_out}/a.tsv",
         "--encoder", "{not_encoder}", culprit="not_encoder", absent="new_out"),  # was "needs sentence-transformers"
    case("align-docs-del-factor-0", DOCS, "--src", "{doc_en}", "--tgt", "{doc_vi}", "--output", "{new_out}/a.tsv",
         "--del-factor", "0", culprit="--del-factor", absent="new_out"),  # free deletions: an empty alignment
    case("train-encoder-epochs-0", ENC, "--corpus", "{tsv}", "--output", "{new_out}", "--epochs", "0", culprit="--epochs", absent="new_out"),
    case("train-encoder-layers-negative", ENC, "--corpus", "{tsv}", "--output", "{new_out}", "--layers", "-1", culprit="--layers",
         absent="new_out"),
    case("clean-parquet-without-src", CLEAN, "--input", "{no_src}", "--output", "{new_out}", "--no-mlflow", culprit="src", absent="new_out"),
    case("clean-parquet-working-column", CLEAN, "--input", "{underscored}", "--output", "{new_out}", "--no-mlflow", culprit="'_score'",
         absent="new_out"),  # a user's `_score` column failed inside a Ray worker with a 266-line traceback
    case("clean-rules-min-above-max", CLEAN, "--input", "{tsv}", "--output", "{new_out}", "--config", "{rules_ranges}",
         culprit="min_ratio", absent="new_out"),
    case("backtranslate-clean-config-missing", BT, "--corpus", "{tsv}", "--mono", "{mono}", "--output", "{new_out}",
         "--clean-config", "{new_out}.yaml", culprit="new_out.yaml", absent="new_out"),  # the option was refused as unknown
    case("backtranslate-unknown-reverse-preset", BT, "--corpus", "{tsv}", "--mono", "{mono}", "--output", "{new_out}",
         "--reverse-preset", "nope", culprit="--reverse-preset", absent="new_out"),
    case("report-dead-server", REPORT, "--store", "http://127.0.0.1:9", "--output", "{new_out}", culprit="127.0.0.1:9", absent="new_out"),
    case("report-store-typo", REPORT, "--store", "sqlite:///{new_out}/mlfow.db", "--output", "{new_out}/board",
         culprit="no such MLflow store", absent="new_out"),  # it was created empty and read as "no runs", exit 0
    case("report-store-not-a-database", REPORT, "--store", "sqlite:///{a_file}", "--output", "{new_out}",
         culprit="not an SQLite database", absent="new_out"),
    case("ui-port-out-of-range", UI, "--port", "99999", culprit="--port"),
    case("clean-rules-path-not-a-string", CLEAN, "--input", "{tsv}", "--output", "{new_out}", "--config", "{rules_int_path}",
         culprit="TestOverlap", absent="new_out"),
    case("clean-output-is-a-file", CLEAN, "--input", "{tsv}", "--output", "{a_file}", culprit="a_file"),
    case("clean-num-cpus-negative", CLEAN, "--input", "{tsv}", "--output", "{new_out}", "--num-cpus", "-1", culprit="--num-cpus",
         absent="new_out"),
    # --overwrite would have replaced the folder, and with it the corpus being read
    case("clean-output-holds-its-input", CLEAN, "--input", "{corpus_dir}/c.tsv", "--output", "{corpus_dir}", "--overwrite",
         "--no-mlflow", culprit="holds the input"),
    case("backtranslate-output-holds-its-corpus", BT, "--corpus", "{corpus_dir}/c.tsv", "--mono", "{mono}", "--output",
         "{corpus_dir}", "--overwrite", culprit="holds the input --corpus"),
    case("backtranslate-output-is-a-file", BT, "--corpus", "{tsv}", "--mono", "{mono}", "--output", "{a_file}", culprit="a_file"),
    # --- more of the same kinds
    case("translate-missing-dir", T, "--model", "{nothing}", culprit="nothing"),
    case("translate-missing-spm", T, "--model", "{ckpt_no_spm}", culprit="spm.model"),
    case("translate-config-not-json", T, "--model", "{ckpt_bad_json}", culprit="config.json"),
    case("translate-another-architecture", T, "--model", "{ckpt_rnn_config}", culprit="another architecture", stdin=b"hi\n"),
    case("translate-top-p-zero", T, "--model", "{ckpt}", "--top-p", "0", culprit="--top-p"),
    case("evaluate-reverse-model", E, "--model", "{ckpt_reverse}", "--test", "{test}", "--direction", "en-vi", culprit="reverse model"),
    case("evaluate-missing-test", E, "--model", "{ckpt}", "--test", "{nothing}.parquet", culprit="nothing"),
    case("evaluate-truncated-weights", E, "--model", "{ckpt_truncated}", "--test", "{test}", culprit="model.pt"),
    case("align-docs-missing-src", DOCS, "--src", "{nothing}.txt", "--tgt", "{doc_vi}", "--output", "{new_out}/a.tsv",
         culprit="nothing", absent="new_out"),
    case("train-encoder-missing-corpus", ENC, "--corpus", "{nothing}.tsv", "--output", "{new_out}", culprit="nothing", absent="new_out"),
    case("clean-missing-input", CLEAN, "--input", "{nothing}.tsv", "--output", "{new_out}", culprit="nothing", absent="new_out"),
    case("clean-unknown-rule", CLEAN, "--input", "{tsv}", "--output", "{new_out}", "--config", "{rules_unknown}", culprit="NoSuchRule",
         absent="new_out"),
    case("clean-rules-not-yaml", CLEAN, "--input", "{tsv}", "--output", "{new_out}", "--config", "{rules_not_yaml}", culprit="YAML",
         absent="new_out"),
    case("clean-rules-negative-count", CLEAN, "--input", "{tsv}", "--output", "{new_out}", "--config", "{rules_negative}",
         culprit="min_chars", absent="new_out"),
    case("clean-tsv-invalid-utf8", CLEAN, "--input", "{bad_utf8}", "--output", "{new_out}", "--no-mlflow", culprit="bad.tsv"),
    case("align-filter-k-0", ALIGN, "--input", "{tsv}", "--output", "{new_out}", "--k", "0", culprit="--k", absent="new_out"),
    case("align-filter-threshold-text", ALIGN, "--input", "{tsv}", "--output", "{new_out}", "--threshold", "high", culprit="threshold",
         absent="new_out"),
    case("align-filter-output-is-a-file", ALIGN, "--input", "{tsv}", "--output", "{a_file}", culprit="a_file"),
    case("backtranslate-missing-mono", BT, "--corpus", "{tsv}", "--mono", "{nothing}.vi", "--output", "{new_out}", culprit="--mono",
         absent="new_out"),
    case("backtranslate-ratio-0", BT, "--corpus", "{tsv}", "--mono", "{mono}", "--output", "{new_out}", "--ratio", "0", culprit="--ratio",
         absent="new_out"),
    case("backtranslate-missing-corpus", BT, "--corpus", "{nothing}.tsv", "--mono", "{mono}", "--output", "{new_out}", culprit="--corpus",
         absent="new_out"),
    case("train-heads-do-not-divide", TRAIN, "model.heads=3", culprit="`heads`"),
    case("train-unknown-key", TRAIN, "model.colour=1", culprit="colour"),
    case("train-negative-max-steps", TRAIN, "train.max_steps=-1", culprit="max_steps"),
    case("train-missing-config", TRAIN, "--config", "{nothing}.yaml", culprit="nothing"),
    case("tune-unknown-key", TUNE, "train.colour=1", culprit="colour"),
    case("report-unknown-experiment", REPORT, "--store", "{store}", "--experiment", "nope", "--output", "{new_out}", culprit="nope",
         absent="new_out"),
    case("ui-store-is-a-server", UI, "--store", "http://127.0.0.1:9", "--port", "1", culprit="127.0.0.1:9"),
    # --- found by a review after issue 18: files that are not what they claim to be
    case("train-config-not-yaml", TRAIN, "--config", "{job_not_yaml}", "--dry-run", culprit="job_not_yaml.yaml:4"),
    case("train-config-latin1", TRAIN, "--config", "{job_latin1}", "--dry-run", culprit="job_latin1.yaml:2"),
    case("train-model-section-is-a-word", TRAIN, "--config", "{job_model_word}", "--dry-run", culprit="`model`"),
    case("train-lr-scale-nan", TRAIN, "train.lr_scale=nan", "--dry-run", culprit="lr_scale"),
    case("tune-config-not-yaml", TUNE, "--config", "{job_not_yaml}", culprit="job_not_yaml.yaml:4"),
    case("tune-dry-run-data-missing", TUNE, "--data", "{nothing}.tsv", "--dry-run", culprit="nothing"),
    case("clean-rules-unknown-language", CLEAN, "--input", "{tsv}", "--output", "{new_out}", "--config", "{rules_language}",
         culprit="vn", absent="new_out"),
    case("clean-rules-nan", CLEAN, "--input", "{tsv}", "--output", "{new_out}", "--config", "{rules_nan}", culprit="max_ratio",
         absent="new_out"),
    case("clean-rules-latin1", CLEAN, "--input", "{tsv}", "--output", "{new_out}", "--config", "{rules_latin1}",
         culprit="rules_latin1.yaml:2", absent="new_out"),
    case("clean-corrupt-gzip", CLEAN, "--input", "{corrupt_gz}", "--output", "{new_out}", "--no-mlflow", culprit="corrupt.tsv.gz",
         absent="new_out"),
    case("clean-parquet-parts-differ", CLEAN, "--input", "{mixed_parts}", "--output", "{new_out}", "--no-mlflow",
         culprit="part-1.parquet", absent="new_out"),
    case("align-docs-blank-document", DOCS, "--src", "{blank_doc}", "--tgt", "{doc_vi}", "--output", "{new_out}/a.tsv",
         "--encoder", "{encoder}", culprit="blank.txt", absent="new_out"),
    # --- found by a review of the decoding and export commands (session 14)
    case("evaluate-empty-references", E, "--model", "{ckpt}", "--test", "{empty_refs}", culprit="every reference"),
    case("translate-output-folder-missing", T, "--model", "{ckpt}", "-o", "{new_out}/out.vi", culprit="-o/--output",
         stdin=b"hello\n", absent="new_out"),
    case("export-force-onto-its-checkpoint", "-m mtcore.export", "--to", "ctranslate2", "{ckpt_export}", "{ckpt_export}", "--force",
         culprit="inside the checkpoint"),
    case("align-docs-encoder-is-a-translation-model", DOCS, "--src", "{doc_en}", "--tgt", "{doc_vi}", "--output", "{new_out}/a.tsv",
         "--encoder", "{ckpt}", culprit="a translation checkpoint, not a sentence encoder", absent="new_out"),
    case("align-filter-encoder-is-a-translation-model", ALIGN, "--input", "{tsv}", "--output", "{new_out}", "--encoder", "{ckpt}",
         culprit="a translation checkpoint, not a sentence encoder", absent="new_out"),  # with Ray: named before the actors
    case("backtranslate-encoder-half-copied", BT, "--corpus", "{tsv}", "--mono", "{mono}", "--output", "{new_out}",
         "--encoder", "{half_encoder}", culprit="neither an mtcore encoder", absent="new_out"),
    case("backtranslate-reverse-model-unknown-run", BT, "--corpus", "{tsv}", "--mono", "{mono}", "--output", "{new_out}",
         "--reverse-model", "runs:/0123456789abcdef/translator", culprit="--reverse-model runs:/0123456789abcdef", absent="new_out"),
    case("backtranslate-ratio-nan", BT, "--corpus", "{tsv}", "--mono", "{mono}", "--output", "{new_out}", "--ratio", "nan",
         culprit="ratio", absent="new_out"),
    case("clean-rules-file-empty", CLEAN, "--input", "{tsv}", "--output", "{new_out}", "--config", "{rules_empty}", culprit="no rules",
         absent="new_out"),
    case("align-docs-encoder-path-missing", DOCS, "--src", "{doc_en}", "--tgt", "{doc_vi}", "--output", "{new_out}/a.tsv",
         "--encoder", "{nothing}/encoder", culprit="encoder directory not found", absent="new_out"),
    # --- found by three reviews in session 16: outputs that replaced users' files, damaged inputs, odd values
    case("clean-overwrite-a-folder-of-other-files", CLEAN, "--input", "{tsv}", "--output", "{user_dir}", "--overwrite",
         "--no-mlflow", culprit="no mtcore stage made"),  # --overwrite deleted notes.txt with the folder
    case("clean-output-is-the-current-directory", CLEAN, "--input", "{tsv}", "--output", ".", "--no-mlflow",
         culprit="the current directory"),
    case("clean-parquet-invalid-utf8", CLEAN, "--input", "{bad_utf8_parquet}", "--output", "{new_out}", "--no-mlflow",
         culprit="column 'src', row 2", absent="new_out"),
    case("train-encoder-output-holds-other-files", ENC, "--corpus", "{tsv}", "--output", "{user_dir}", "--no-mlflow",
         culprit="not an encoder"),  # training replaced the folder whole
    case("train-encoder-output-holds-its-corpus", ENC, "--corpus", "{corpus_dir}/c.tsv", "--output", "{corpus_dir}",
         "--no-mlflow", culprit="holds the input corpus"),
    case("train-encoder-classifier-epochs-0", ENC, "--classifier-only", "--corpus", "{tsv}", "--output", "{encoder}",
         "--classifier-epochs", "0", "--no-mlflow", culprit="epochs"),
    case("align-docs-output-is-its-source", DOCS, "--src", "{doc_en_copy}", "--tgt", "{doc_vi}", "--output", "{doc_en_copy}",
         "--encoder", "{encoder}", culprit="holds the input --src"),
    case("align-docs-del-factor-inf", DOCS, "--src", "{doc_en}", "--tgt", "{doc_vi}", "--output", "{new_out}/a.tsv",
         "--del-factor", "inf", culprit="--del-factor", absent="new_out"),
    case("align-docs-src-is-a-directory", DOCS, "--src", "{corpus_dir}", "--tgt", "{doc_vi}", "--output", "{new_out}/a.tsv",
         "--encoder", "{encoder}", culprit="a directory", absent="new_out"),
    case("align-filter-encoder-truncated-weights", ALIGN, "--input", "{tsv}", "--output", "{new_out}", "--encoder",
         "{encoder_truncated}", culprit="model.pt: damaged", absent="new_out"),  # with Ray: named before the actors
    case("align-filter-encoder-damaged-reference", ALIGN, "--input", "{tsv}", "--output", "{new_out}", "--encoder",
         "{encoder_bad_reference}", culprit="reference.parquet: damaged", absent="new_out"),
    case("translate-beam-over-the-vocabulary", T, "--model", "{ckpt}", "--beam", "400", culprit="--beam 400", stdin=b"hello\n"),
    case("build-near-miss-dev-share-negative", "pipelines/build_near_miss_dev.py", "--share", "-1", "--output",
         "{new_out}/nm.parquet", culprit="--share", absent="new_out"),
    case("build-outdated-dev-share-over-one", "pipelines/build_outdated_dev.py", "--share", "1.5", "--output",
         "{new_out}/od.parquet", culprit="--share", absent="new_out"),
    case("build-outdated-dev-per-catalog-zero", "pipelines/build_outdated_dev.py", "--per-catalog", "0", "--output",
         "{new_out}/od.parquet", culprit="--per-catalog", absent="new_out"),
    # --- found by a review of configuration and cluster use: refused only at stage 3, after cleaning and alignment
    case("backtranslate-seed-negative", BT, "--corpus", "{tsv}", "--mono", "{mono}", "--output", "{new_out}",
         "--seed", "-1", culprit="--seed (-1)", absent="new_out"),
    case("backtranslate-reverse-vocab-too-small", BT, "--corpus", "{tsv}", "--mono", "{mono}", "--output", "{new_out}",
         "--reverse-vocab", "8", culprit="--reverse-vocab 8", absent="new_out"),
]
if not IS_ROOT:
    CATALOGUE.append(case("clean-output-read-only", CLEAN, "--input", "{tsv}", "--output", "{read_only}/out", culprit="read_only"))


# --------------------------------------------------------------------------- the kit of bad inputs


def _kit(root: Path) -> dict[str, str]:
    import torch

    from mtcore.config import ModelConfig
    from mtcore.data.corpus import write_parquet
    from mtcore.embedding.encoder import DualEncoder, EncoderConfig, save_encoder
    from mtcore.nmt.checkpoint import CONFIG, SPM, WEIGHTS, save_checkpoint
    from mtcore.nmt.model import build_model
    from mtcore.nmt.tokenizer import train_tokenizer
    from mtcore.nmt.training import toy_pairs

    torch.set_num_threads(1)
    pairs = toy_pairs(60, seed=3)
    k = {"root": root, "nothing": root / "nothing", "new_out": root / "new_out", "store": f"sqlite:///{root / 'mlflow.db'}"}
    import mlflow

    mlflow.MlflowClient(tracking_uri=k["store"]).search_experiments()  # the store exists, as after a first run
    tok = train_tokenizer([s for p in pairs for s in p], root / "spm.model", vocab_size=400)

    def ckpt(name, **kw):
        cfg = ModelConfig.preset("tiny", vocab_size=tok.vocab_size, **kw)
        return save_checkpoint(root / name, build_model(cfg), tok, step=1)

    k["ckpt"], k["ckpt_reverse"] = ckpt("ckpt"), ckpt("ckpt_reverse", src_lang="vi", tgt_lang="en")
    for name in ("ckpt_truncated", "ckpt_random", "ckpt_no_spm", "ckpt_bad_json", "ckpt_rnn_config"):
        k[name] = shutil.copytree(k["ckpt"], root / name)
    weights = (k["ckpt_truncated"] / WEIGHTS).read_bytes()
    (k["ckpt_truncated"] / WEIGHTS).write_bytes(weights[: len(weights) // 2])
    meta = json.loads((k["ckpt_random"] / CONFIG).read_text())
    del meta["files"]  # as a checkpoint written before the manifest: torch itself meets the bytes
    (k["ckpt_random"] / CONFIG).write_text(json.dumps(meta))
    (k["ckpt_random"] / WEIGHTS).write_bytes(os.urandom(4096))
    (k["ckpt_no_spm"] / SPM).unlink()
    (k["ckpt_bad_json"] / CONFIG).write_text("{not json")
    meta = json.loads((k["ckpt_rnn_config"] / CONFIG).read_text())
    meta["model"]["arch"] = "rnn"
    (k["ckpt_rnn_config"] / CONFIG).write_text(json.dumps(meta))
    k["encoder"] = save_encoder(DualEncoder(EncoderConfig(vocab_size=tok.vocab_size, d_model=32, dim=32)), tok.model_bytes(),
                                root / "encoder")

    k["tsv"] = root / "good.tsv"
    k["tsv"].write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    k["test"] = write_parquet(pa.table({"src": [s for s, _ in pairs[:8]], "tgt": [t for _, t in pairs[:8]],
                                        "origin": ["toy"] * 8, "id": [f"t{i}" for i in range(8)]}), root / "test.parquet")
    k["no_src"] = root / "no_src.parquet"
    pq.write_table(pa.table({"left": ["a"], "tgt": ["b"]}), k["no_src"])
    k["not_encoder"] = root / "not_encoder"
    k["not_encoder"].mkdir()
    (k["not_encoder"] / "x.txt").write_text("x\n")
    k["underscored"] = root / "underscored.parquet"
    pq.write_table(pa.table({"src": ["Open"], "tgt": ["Mở"], "_score": [0.5]}), k["underscored"])
    k["bad_utf8"] = root / "bad.tsv"
    k["bad_utf8"].write_bytes(b"Open\tM\xe1\xbb\x9f\nSave\t\xff\xfe\n")
    k["mono"] = root / "mono.vi"
    k["mono"].write_text("\n".join(t for _, t in pairs) + "\n", encoding="utf-8")
    k["doc_en"], k["doc_vi"] = root / "doc.en.txt", root / "doc.vi.txt"
    k["doc_en"].write_text("\n".join(s for s, _ in pairs[:10]) + "\n", encoding="utf-8")
    k["doc_vi"].write_text("\n".join(t for _, t in pairs[:10]) + "\n", encoding="utf-8")
    rules = {"rules_ranges": "- LengthRatio: {min_ratio: -3, max_ratio: 0.1}\n", "rules_unknown": "- NoSuchRule: {}\n",
             "rules_not_yaml": "- LengthRatio: {min_ratio: [\n", "rules_negative": "- TooShort: {min_chars: -1}\n",
             "rules_int_path": "- TestOverlap: {paths: [2024]}\n"}
    for name, text in rules.items():
        k[name] = root / f"{name}.yaml"
        k[name].write_text(text)
    texts = {"job_not_yaml": "model:\n  preset: mini\n  heads: [4\n", "job_latin1": "model: {preset: mini}\n# r\xe9glages\n",
             "job_model_word": "model: mini\n", "rules_language": "- LanguageID: {languages: [en, vn]}\n",
             "rules_nan": "- LengthRatio: {max_ratio: .nan}\n", "rules_latin1": "- TooShort: {min_chars: 1}\n# r\xe8gles\n"}
    for name, text in texts.items():
        k[name] = root / f"{name}.yaml"
        k[name].write_bytes(text.encode("latin-1"))
    import gzip

    packed = bytearray(gzip.compress(k["tsv"].read_bytes()))
    packed[20:24] = b"\xff\xff\xff\xff"  # deflate data damaged, the header intact
    k["corrupt_gz"] = root / "corrupt.tsv.gz"
    k["corrupt_gz"].write_bytes(bytes(packed))
    k["mixed_parts"] = root / "mixed"
    k["mixed_parts"].mkdir()
    pq.write_table(pa.table({"src": ["Open"], "tgt": ["Mở"]}), k["mixed_parts"] / "part-0.parquet")
    pq.write_table(pa.table({"source": ["Save"], "target": ["Lưu"]}), k["mixed_parts"] / "part-1.parquet")
    k["half_encoder"] = root / "half_encoder"
    k["half_encoder"].mkdir()
    shutil.copy(Path(k["encoder"]) / "config.json", k["half_encoder"] / "config.json")  # an interrupted copy
    k["rules_empty"] = root / "rules_empty.yaml"
    k["rules_empty"].write_text("# every rule commented out\n# - NonEmpty\n")
    k["empty_refs"] = root / "empty_refs.tsv"
    k["empty_refs"].write_text("Open\t\nSave\t \n", encoding="utf-8")
    k["ckpt_export"] = shutil.copytree(k["ckpt"], root / "ckpt_export")
    k["blank_doc"] = root / "blank.txt"
    k["blank_doc"].write_text("\n  \n\n", encoding="utf-8")
    k["corpus_dir"] = root / "corpus_dir"
    k["corpus_dir"].mkdir()
    shutil.copy(k["tsv"], k["corpus_dir"] / "c.tsv")
    k["a_file"] = root / "a_file"
    k["a_file"].write_text("not a directory\n")
    k["user_dir"] = root / "user_dir"
    k["user_dir"].mkdir()
    (k["user_dir"] / "notes.txt").write_text("mine\n")
    k["bad_utf8_parquet"] = root / "latin1.parquet"
    pq.write_table(pa.table({"src": pa.array([b"Open", b"Caf\xe9"], pa.binary()).view(pa.string()), "tgt": ["Mở", "Cà phê"]}),
                   k["bad_utf8_parquet"])
    k["doc_en_copy"] = shutil.copy(k["doc_en"], root / "doc_copy.en.txt")
    k["encoder_truncated"] = shutil.copytree(k["encoder"], root / "encoder_truncated")
    weights = (k["encoder_truncated"] / "model.pt").read_bytes()
    (k["encoder_truncated"] / "model.pt").write_bytes(weights[: len(weights) // 2])
    k["encoder_bad_reference"] = shutil.copytree(k["encoder"], root / "encoder_bad_reference")
    (k["encoder_bad_reference"] / "reference.parquet").write_text("not parquet\n")
    k["read_only"] = root / "read_only"
    k["read_only"].mkdir(mode=0o555)
    return {name: str(v) for name, v in k.items()}


def _run(c: Case, kit: dict[str, str], home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "MTCORE_HOME": str(home),
           "MLFLOW_TRACKING_URI": kit["store"], "OMP_NUM_THREADS": "1", "RAY_ADDRESS": ""}
    argv = [a.format(**kit) for a in c.argv]
    if not argv[0].startswith("-"):
        argv[0] = str(ROOT / argv[0])
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], input=c.stdin, capture_output=True, cwd=home, env=env, timeout=300)
    proc.seconds = time.perf_counter() - t0
    return proc


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Every row run once, three at a time (each is mostly Python's imports): {id: (process, kit)}."""
    kit = _kit(tmp_path_factory.mktemp("kit"))
    home = tmp_path_factory.mktemp("home")
    with ThreadPoolExecutor(3) as pool:
        procs = dict(zip([c.id for c in CATALOGUE], pool.map(lambda c: _run(c, kit, home), CATALOGUE)))
    if os.environ.get("MTCORE_CATALOGUE_TIMES"):  # the table behind benchmarks/RESULTS.md
        for id_, p in sorted(procs.items(), key=lambda kv: -kv[1].seconds):
            print(f"{id_:40s} rc={p.returncode} {p.seconds:6.1f} s", file=sys.stderr)
    return procs, kit


def _running_runs(store: str) -> list[str]:
    db = Path(store.removeprefix("sqlite:///"))
    if not db.exists():
        return []
    with sqlite3.connect(db) as con:
        return [r[0] for r in con.execute("select name from runs where status = 'RUNNING'")]


@pytest.mark.parametrize("c", CATALOGUE, ids=[c.id for c in CATALOGUE])
def test_bad_input_gets_one_clear_line(c: Case, outcomes):
    procs, kit = outcomes
    proc = procs[c.id]
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2, err
    assert len(lines) == 1, err
    assert c.culprit in lines[0], lines[0]
    if c.absent:
        assert not Path(kit[c.absent]).exists(), f"{c.id} left {kit[c.absent]} behind"


def test_the_users_files_survive_the_refused_commands(outcomes):
    """The rows above that aimed an output at a user's folder or at an input: nothing of theirs changed."""
    _, kit = outcomes
    assert (Path(kit["user_dir"]) / "notes.txt").read_text() == "mine\n"
    assert Path(kit["doc_en_copy"]).read_text(encoding="utf-8") == Path(kit["doc_en"]).read_text(encoding="utf-8")
    assert (Path(kit["corpus_dir"]) / "c.tsv").read_text(encoding="utf-8") == Path(kit["tsv"]).read_text(encoding="utf-8")


def test_no_mlflow_run_left_running(outcomes):
    procs, kit = outcomes
    assert _running_runs(kit["store"]) == []


def test_a_real_bug_keeps_its_traceback():
    """The boundary only turns user errors into one line; anything else is a bug and must show where."""
    code = ("from mtcore.errors import entry_point\n"
            "@entry_point\ndef main(argv=None):\n    return {}['missing']\n"
            "raise SystemExit(main())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "KeyError" in proc.stderr
