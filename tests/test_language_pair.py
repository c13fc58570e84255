"""Another language pair end to end, as a user runs it: a German-English Moses pair through
`pipelines/clean.py --langs de-en`, `experiments/train_transformer.py` (tiny) and `mtcore.translate`/`evaluate`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import product
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mtcore.cleaning import build_config, load_config
from mtcore.cleaning.pipeline import clean_table
from mtcore.config import ConfigError
from mtcore.distributed.jobs import TrainingJob

ROOT = Path(__file__).resolve().parents[1]

SUBJECTS = [("der Hund", "the dog"), ("die Katze", "the cat"), ("das Kind", "the child"), ("der Lehrer", "the teacher"),
            ("die Frau", "the woman"), ("der Mann", "the man"), ("meine Schwester", "my sister")]
PREDICATES = [("ist heute hier", "is here today"), ("ist sehr klein", "is very small"), ("schläft jetzt", "is sleeping now"),
              ("liest ein Buch", "is reading a book"), ("sieht das Haus", "sees the house"),
              ("öffnet das Fenster", "opens the window"), ("trinkt Wasser", "drinks water"), ("ist nicht zu Hause", "is not at home")]


def german_english() -> list[tuple[str, str]]:
    pairs = [(f"{sd} {pd}", f"{se} {pe}") for (sd, se), (pd, pe) in product(SUBJECTS, PREDICATES)]
    pairs += [(f"Ich glaube, {sd} {pd}.", f"I think {se} {pe}.") for (sd, se), (pd, pe) in product(SUBJECTS, PREDICATES)]
    return [(d[0].upper() + d[1:], e[0].upper() + e[1:]) for d, e in pairs]


def run(args: list[str], env: dict, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, *args], env=env, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return out


def test_german_english_clean_train_translate(tmp_path):
    pairs = german_english()
    swapped = [(e, d) for d, e in pairs[:3]]  # English where German belongs: the language-ID rule's catch
    corpus = pairs[3:] + swapped
    (tmp_path / "train.de").write_text("".join(d + "\n" for d, _ in corpus), encoding="utf-8")
    (tmp_path / "train.en").write_text("".join(e + "\n" for _, e in corpus), encoding="utf-8")
    (tmp_path / "dev.tsv").write_text("".join(f"{d}\t{e}\n" for d, e in pairs[:20]), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_"))}
    env |= {"MTCORE_HOME": str(tmp_path / "home"), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}

    run(["pipelines/clean.py", "--input", str(tmp_path / "train"), "--langs", "de-en", "--output", str(tmp_path / "clean"),
         "--no-mlflow"], env, ROOT)
    report = json.loads((tmp_path / "clean" / "report.json").read_text())
    assert report["input"] == len(corpus)
    assert report["rejected"].get("wrong_language", 0) >= len(swapped)
    rejects = pq.read_table(tmp_path / "clean" / "rejects").to_pylist()
    assert {r["src"] for r in rejects if r["reason"] == "wrong_language"} >= {s for s, _ in swapped}
    assert report["kept"] >= 0.9 * (len(corpus) - len(swapped)), report["rejected"]  # German and English are kept

    train = run(["experiments/train_transformer.py", "--config", "experiments/configs/tiny.yaml",
                 "--data", str(tmp_path / "clean"), "--run-name", "de-en-toy", "model.src_lang=de", "model.tgt_lang=en",
                 f"job.dev_data={tmp_path / 'dev.tsv'}", f"job.test_data={tmp_path / 'dev.tsv'}", "job.vocab_size=400",
                 "train.max_steps=120", "train.max_epochs=1000", "train.validate_every=60", "job.log_model=false"], env, ROOT)
    assert "test BLEU" in train.stdout
    best = tmp_path / "home" / "ray_train" / "de-en-toy" / "best"
    assert json.loads((best / "config.json").read_text())["model"]["src_lang"] == "de"

    sources = ["Der Hund ist heute hier", "Die Katze trinkt Wasser"]
    out = run(["-m", "mtcore.translate", "--model", str(best)], env, ROOT, stdin="\n".join(sources) + "\n")
    hyps = out.stdout.splitlines()
    assert len(hyps) == 2 and all(h.strip() for h in hyps)
    assert not any(h.strip() in sources for h in hyps)  # translated, not copied
    scored = run(["-m", "mtcore.evaluate", "--model", str(best), "--test", str(tmp_path / "dev.tsv")], env, ROOT)
    assert "(de-en, step " in scored.stdout
    bleu = float(next(line for line in scored.stdout.splitlines() if line.startswith("BLEU")).split()[1])
    assert bleu > 30, scored.stdout  # 120 steps learn this toy language pair (the dev pairs are training pairs)


def test_language_id_rule_for_any_pair_judges_each_side():
    cfg = load_config().with_languages("fr", "en")
    rows = [("Le chat dort sur le canapé", "The cat sleeps on the sofa"),
            ("The cat sleeps on the sofa today", "The cat sleeps on the sofa today!"),  # near copy: not language ID's
            ("Le chien mange dans la cuisine", "Le chien mange dans la cuisine ce soir")]  # target not English
    import pyarrow as pa

    table = pa.table({"src": [s for s, _ in rows], "tgt": [t for _, t in rows], "origin": ["t"] * 3, "id": ["1", "2", "3"]})
    kept, rejects, _ = clean_table(table, cfg)
    reasons = {r["id"]: r["reason"] for r in rejects.to_pylist()}
    assert "1" in kept["id"].to_pylist() and reasons.get("3") == "wrong_language"


def test_a_pair_without_its_own_data_or_with_unknown_languages_fails_before_work():
    with pytest.raises(ConfigError, match="embedded corpora are English-Vietnamese"):
        TrainingJob.load(None, ["model.src_lang=de", "model.tgt_lang=en"])
    from mtcore.data.paths import DEV

    relative = os.path.relpath(DEV)  # data/dev.parquet as typed from the checkout: the same embedded en-vi set
    with pytest.raises(ConfigError, match=r"job.dev_data: the embedded corpora are English-Vietnamese"):
        TrainingJob.load(None, ["model.src_lang=de", "model.tgt_lang=en", "job.train_data=x", f"job.dev_data={relative}",
                                "job.test_data=z"])
    with pytest.raises(ConfigError, match="corpus languages en-vi differ"):
        TrainingJob.load(None, ["model.src_lang=de", "model.tgt_lang=en", "job.corpus_langs=en-vi", "job.train_data=x",
                                "job.dev_data=y", "job.test_data=z"])
    with pytest.raises(ConfigError, match="py3langid does not know"):
        load_config().with_languages("xx", "en")


def test_corpus_langs_take_a_region_as_langs_does():
    """`--langs en-zh_CN` cleans a corpus that `job.corpus_langs=en-zh_CN` and `evaluate --corpus-langs` refused."""
    job = TrainingJob.load(None, ["model.src_lang=en", "model.tgt_lang=zh_cn", "job.corpus_langs=en-zh_CN",
                                  "job.train_data=x", "job.dev_data=y", "job.test_data=z"])
    assert job.job.corpus_langs == "en-zh_CN"
    with pytest.raises(ConfigError, match="job.corpus_langs` english-vi: expected two language codes"):
        TrainingJob.load(None, ["job.corpus_langs=english-vi"])


def test_a_moses_prefix_of_another_pair_is_training_and_test_data(tmp_path):
    """`--data train` with train.de + train.en (and dev/test prefixes) for a de→en model: it looked for train.vi."""
    from mtcore.distributed import ray_training

    pairs = [("Öffne die Datei", "Open the file"), ("Speichern unter", "Save as")]
    for lang, side in (("de", 0), ("en", 1)):
        (tmp_path / f"train.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    prefix = tmp_path / "train"
    job = TrainingJob.load(None, ["model.src_lang=de", "model.tgt_lang=en", f"job.train_data={prefix}", f"job.dev_data={prefix}",
                                  f"job.test_data={prefix}"])
    assert ray_training.resolve_train_data(job) == str((tmp_path / "train").absolute())
    assert ray_training.load_pairs(str(tmp_path / "train"), job) == pairs


def test_one_prefix_with_three_languages_gets_a_tokenizer_per_pair_and_its_dev_set_counts_by_contents(tmp_path, monkeypatch):
    """train.de + train.en + train.vi: the de-en tokenizer was reused for en-vi (Vietnamese fell back to bytes);
    a dev set given as a prefix counted by its path, so editing it resumed the old run."""
    from mtcore.distributed import ray_training
    from mtcore.nmt.tokenizer import Tokenizer
    from mtcore.nmt.training import toy_pairs

    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    en = [s for s, _ in toy_pairs(300, seed=2)]
    vi = [t for _, t in toy_pairs(300, seed=2)]
    de = [f"Datei {i} öffnen und schließen" for i in range(300)]
    for lang, lines in (("en", en), ("vi", vi), ("de", de)):
        (tmp_path / f"train.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        (tmp_path / f"dev.{lang}").write_text("".join(line + "\n" for line in lines[:5]), encoding="utf-8")
    prefix = str(tmp_path / "train")

    def job(*langs):
        return TrainingJob.load(None, [*langs, f"job.train_data={prefix}", f"job.dev_data={tmp_path / 'dev'}",
                                       f"job.test_data={tmp_path / 'dev'}",
                                       "job.vocab_size=400"])

    de_en, en_vi = job("model.src_lang=de", "model.tgt_lang=en"), job()
    paths = [ray_training.tokenizer_for(prefix, j) for j in (de_en, en_vi)]
    assert paths[0] != paths[1]
    vi_pieces = Tokenizer(str(paths[1])).encode_pieces([vi[0]])[0]
    assert not [p for p in vi_pieces if p.startswith("<0x")], vi_pieces  # its own pieces, no byte fallback

    before = en_vi.fingerprint("data-v1")
    (tmp_path / "dev.vi").write_text("".join(line + "\n" for line in vi[5:10]), encoding="utf-8")
    assert en_vi.fingerprint("data-v1") != before


def test_german_english_encoder_and_alignment_filter(tmp_path):
    """`train_encoder.py --langs de-en` cleans with German-English rules (the en-vi ones rejected nearly every pair
    as wrong_language, silently) and records its pair; `align_filter.py --langs de-en` reads the Moses pair, names
    its text exports by the languages, and refuses an encoder of another pair before any work."""
    pairs = german_english()
    (tmp_path / "train.de").write_text("".join(d + "\n" for d, _ in pairs), encoding="utf-8")
    (tmp_path / "train.en").write_text("".join(e + "\n" for _, e in pairs), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_"))}
    env |= {"MTCORE_HOME": str(tmp_path / "home")}

    out = run(["pipelines/train_encoder.py", "--corpus", str(tmp_path / "train"), "--langs", "de-en", "--output",
               str(tmp_path / "enc"), "--epochs", "2", "--vocab-size", "400", "--no-mlflow"], env, ROOT)
    metrics = json.loads((tmp_path / "enc" / "metrics.json").read_text())
    assert metrics["langs"] == "de-en" and "p_at_1_de_en" in metrics and "de→en" in out.stdout
    assert metrics["train_pairs"] + metrics["heldout_pairs"] + metrics["reference_pairs"] >= 0.9 * len(pairs), metrics

    filtered = run(["pipelines/align_filter.py", "--input", str(tmp_path / "train"), "--langs", "de-en", "--encoder",
                    str(tmp_path / "enc"), "--output", str(tmp_path / "align"), "--format", "txt", "--no-mlflow"], env, ROOT)
    report = json.loads((tmp_path / "align" / "report.json").read_text())
    assert report["input"] == len(pairs) == report["kept"] + sum(report["rejected"].values())
    kept = (tmp_path / "align" / "kept.de").read_text(encoding="utf-8").splitlines()
    assert len(kept) == report["kept"] and set(kept) <= {d for d, _ in pairs}, filtered.stdout
    assert len((tmp_path / "align" / "kept.en").read_text(encoding="utf-8").splitlines()) == len(kept)

    env["MTCORE_HOME"] = str(tmp_path / "fresh")  # no built-in encoder there: a refusal must come before training one
    refused = subprocess.run([sys.executable, "pipelines/align_filter.py", "--input", str(tmp_path / "train"), "--langs",
                              "de-en", "--output", str(tmp_path / "align2"), "--no-mlflow"], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "trained on en-vi pairs, and the corpus is de-en" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "fresh" / "encoders").exists()


def test_a_vi_en_stage_output_trains_a_vi_to_en_model_the_right_way_round(tmp_path):
    """`clean --langs vi-en` records its columns; a vi→en model trained on that output read them as the en-vi
    default and learned English→Vietnamese under a vi-en label."""
    import pyarrow as pa

    from mtcore.data.corpus import write_parquet
    from mtcore.distributed import ray_training

    pairs = [("Mở tệp", "Open the file"), ("Lưu thành", "Save as")]  # (vi, en): the columns of a vi-en corpus
    stage = tmp_path / "clean-vi-en"
    write_parquet(pa.table({"src": [v for v, _ in pairs], "tgt": [e for _, e in pairs]}), stage / "kept" / "part-0.parquet")
    (stage / "report.json").write_text(json.dumps({"stage": "clean", "config": {"languages": ["vi", "en"]}}))
    job = TrainingJob.load(None, ["model.src_lang=vi", "model.tgt_lang=en", f"job.train_data={stage / 'kept'}",
                                  f"job.dev_data={stage / 'kept'}", f"job.test_data={stage / 'kept'}"])
    assert ray_training.load_pairs(str(stage / "kept"), job) == pairs  # vi source, en target
    en_vi = TrainingJob.load(None, [f"job.train_data={stage / 'kept'}", f"job.dev_data={stage / 'kept'}",
                                    f"job.test_data={stage / 'kept'}"])
    assert ray_training.load_pairs(str(stage / "kept"), en_vi) == [(e, v) for v, e in pairs]  # swapped for en→vi
    (stage / "report.json").unlink()  # no record: columns are en-vi for an en/vi model, as before
    assert ray_training.load_pairs(str(stage / "kept"), job) == [(e, v) for v, e in pairs]


def test_a_stage_output_of_another_pair_is_not_read_as_en_vi(tmp_path):
    """An en-de cleaning output trained an en→vi model on German targets, scored on the en-vi test set, without a
    word; align_filter and train_encoder read it with the en-vi rules unless --langs was repeated."""
    import pyarrow as pa

    from mtcore.data.corpus import write_parquet
    from mtcore.distributed import ray_training
    from mtcore.distributed.ray_training import JobError
    from mtcore.runs import languages_of

    stage = tmp_path / "clean-en-de"
    write_parquet(pa.table({"src": ["Open the file"], "tgt": ["Datei öffnen"]}), stage / "kept" / "part-0.parquet")
    (stage / "report.json").write_text(json.dumps({"stage": "clean", "config": {"languages": ["en", "de"]}}))
    job = TrainingJob.load(None, [f"job.train_data={stage}"])
    with pytest.raises(JobError, match=r"holds en-de pairs .* model.src_lang=en model.tgt_lang=de"):
        ray_training.resolve_train_data(job)
    assert languages_of(stage, None) == languages_of(stage / "kept", None) == ("en", "de")  # align_filter's default
    assert languages_of(stage, "de-en") == ("de", "en") and languages_of(tmp_path, None) == ("en", "vi")
    aligned = tmp_path / "align-en-de"  # the alignment filter's report names them `langs`
    aligned.mkdir()
    (aligned / "report.json").write_text(json.dumps({"stage": "align_filter", "config": {"langs": ["en", "de"]}}))
    assert languages_of(aligned, None) == ("en", "de")


@pytest.mark.parametrize("langs, src, tgt", [
    (("en", "zh"), "The cat is drinking water in the kitchen today.", "猫今天在厨房里喝水。"),
    (("zh", "en"), "我非常喜欢这本新书。", "I like this new book very much."),
    (("en", "ja"), "Please open the settings window now.", "今すぐ設定ウィンドウを開いてください。"),
    (("en", "ko"), "Where is the nearest train station?", "가장 가까운 기차역은 어디에 있습니까?"),
])
def test_correct_cjk_pairs_are_kept(langs, src, tgt):
    """A Han character carries about three Latin letters: 156 of 160 correct zh-en pairs were `length_ratio`
    rejects, and every en-zh pair a `punctuation_mismatch` (。 was no sentence end)."""
    kept, rejects, _ = clean_table(pa.table({"src": [src], "tgt": [tgt], "origin": ["t"], "id": ["t:1"]}),
                                   load_config().with_languages(*langs))
    assert len(kept) == 1, rejects.to_pylist()
    short = clean_table(pa.table({"src": [src], "tgt": [tgt[:2]], "origin": ["t"], "id": ["t:1"]}),
                        load_config().with_languages(*langs))[1]
    assert short["reason"].to_pylist() in (["length_ratio"], ["punctuation_mismatch"])  # a truncated one is not


def test_the_embedded_held_out_sets_guard_a_vi_en_corpus_too():
    """With --langs vi-en the en-vi dev/test files were read as vi-en: English sources compared with the
    Vietnamese column, and 288 of 300 test pairs passed into the training data."""
    from mtcore.data.corpus import read_corpus
    from mtcore.data.paths import TEST

    test = read_corpus(TEST).slice(0, 50)
    vi_en = pa.table({"src": test["tgt"], "tgt": test["src"], "origin": test["origin"], "id": test["id"]})
    _, rejects, _ = clean_table(vi_en, load_config().with_languages("vi", "en"))
    assert rejects["reason"].to_pylist().count("test_overlap") >= 45


def test_an_augmented_set_cannot_train_the_direction_its_synthetic_side_would_be_the_target(tmp_path, caplog):
    """A vi→en model on the main job's output learned to write noised `<bt>` English; a train_limit took only real rows."""
    from mtcore.config import ConfigError
    from mtcore.data.corpus import write_parquet
    from mtcore.distributed import ray_training

    rows = [("Open the file", "Mở tệp", False), ("Save as", "Lưu thành", False), ("<bt> the file open", "Mở tệp ra", True)]
    path = write_parquet(pa.table({"src": [r[0] for r in rows], "tgt": [r[1] for r in rows], "origin": ["a"] * 3,
                                   "id": ["a:1", "a:2", "bt:m:1"], "synthetic": [r[2] for r in rows]}), tmp_path / "aug.parquet")
    common = [f"job.train_data={path}", f"job.dev_data={path}", f"job.test_data={path}"]
    with pytest.raises(ConfigError, match="its 1 synthetic pairs have machine-made en sides"):
        ray_training.load_pairs(str(path), TrainingJob.load(None, ["model.src_lang=vi", "model.tgt_lang=en", *common]))
    en_vi = TrainingJob.load(None, common)
    assert len(ray_training.load_pairs(str(path), en_vi)) == 3
    with caplog.at_level("WARNING", logger="mtcore.distributed.ray_training"):
        assert len(ray_training.load_pairs(str(path), en_vi, limit=2)) == 2
    assert "none of its 1 synthetic pairs is trained on" in caplog.text
    # A cached encoding says the same from the synthetic column alone (the texts are not read again)
    column = ray_training._synthetic_column(str(path), ("en", "vi"))
    assert column.column_names == ["synthetic"] and column.num_rows == 3
    with pytest.raises(ConfigError, match="its 1 synthetic pairs have machine-made en sides"):
        ray_training.check_synthetic_side(column, str(path), TrainingJob.load(None, ["model.src_lang=vi", "model.tgt_lang=en",
                                                                                   *common]), ("en", "vi"), 0)


@pytest.mark.parametrize("langs, src, tgt", [
    (("zh", "en"), "他在市场买了３个苹果，花了１５元。", "He bought 3 apples at the market for 15 yuan."),  # full-width digits
    (("ar", "en"), "اشترى ٣ تفاحات من السوق بـ ١٥ يوان.", "He bought 3 apples at the market for 15 yuan."),  # Arabic-Indic
    (("zh", "en"), "请发邮件至support@example.com联系我们。", "Please email support@example.com to contact us."),
    (("zh", "en"), "访问https://example.com/docs，谢谢。", "Visit https://example.com/docs, thank you."),
])
def test_digits_and_addresses_of_other_scripts(langs, src, tgt):
    """Digits are compared by value, and an address ends where the ASCII does: both were rejects of correct pairs."""
    kept, rejects, _ = clean_table(pa.table({"src": [src], "tgt": [tgt], "origin": ["t"], "id": ["t:1"]}),
                                   load_config().with_languages(*langs))
    assert len(kept) == 1, rejects.to_pylist()


def test_a_chinese_corpus_trains_a_tokenizer_with_the_cjk_character_coverage(tmp_path, monkeypatch):
    """A piece per Han character overflowed the vocabulary ("vocab_size 8000 is too small" on 9k characters), and
    mtcore had no way to pass SentencePiece's CJK coverage: job.character_coverage does, and the rarest characters
    fall back to bytes."""
    from mtcore.distributed import ray_training
    from mtcore.nmt.tokenizer import Tokenizer

    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    han = [chr(0x4E00 + i) for i in range(300)]
    zh = ["".join(han[(7 * i + k) % 300] for k in range(20)) + "。" for i in range(600)] + ["罕"]  # one rare character
    en = [f"sentence number {i} of the corpus" for i in range(600)] + ["rare"]
    corpus = tmp_path / "zh-en.tsv"
    corpus.write_text("".join(f"{a}\t{b}\n" for a, b in zip(zh, en)), encoding="utf-8")
    common = ["model.src_lang=zh", "model.tgt_lang=en", f"job.train_data={corpus}", f"job.dev_data={corpus}",
              f"job.test_data={corpus}", "job.vocab_size=2000"]
    full = Tokenizer(ray_training.tokenizer_for(str(corpus), TrainingJob.load(None, common)))
    cjk = Tokenizer(ray_training.tokenizer_for(str(corpus), TrainingJob.load(None, common + ["job.character_coverage=0.9995"])))
    assert "罕" in full.encode_pieces(["罕"])[0] and any(p.startswith("<0x") for p in cjk.encode_pieces(["罕"])[0])


def test_a_vi_en_corpus_is_judged_as_its_en_vi_mirror():
    """The rules' bounds and word lists were measured on en-vi: read the other way round they rejected 89 of 3,000
    correct pairs where en-vi rejected 57 (a review; "Không thể di chuyển vị trí đọc trên đĩa CD." / "Could not seek
    CD." was a length_ratio reject as vi-en only). A vi-en corpus is now judged exactly as its mirror."""
    from mtcore.data.corpus import read_corpus
    from mtcore.data.paths import RAW_PARALLEL

    raw = read_corpus(RAW_PARALLEL).slice(20_000, 3_000)
    mirror = raw.rename_columns([{"src": "tgt", "tgt": "src"}.get(c, c) for c in raw.column_names])
    kept_ev, rej_ev, _ = clean_table(raw, load_config().with_languages("en", "vi"))
    kept_ve, rej_ve, _ = clean_table(mirror, load_config().with_languages("vi", "en"))
    assert len(rej_ev) > 10  # the sample holds rejects to compare
    assert sorted(zip(rej_ve["id"].to_pylist(), rej_ve["reason"].to_pylist())) == \
        sorted(zip(rej_ev["id"].to_pylist(), rej_ev["reason"].to_pylist()))
    assert kept_ve["src"].to_pylist() == kept_ev["tgt"].to_pylist()  # the kept pairs keep their own orientation
    assert kept_ve["tgt"].to_pylist() == kept_ev["src"].to_pylist()  # and are normalised alike, English included


def test_a_pseudo_context_is_taken_from_the_english_side_of_an_x_en_corpus():
    """Normalisation ran before the sides were turned round and stripped the source only, so a vi-en (or de-en)
    corpus kept glib's "Script|Cherokee" and Wesnoth's "female^lawful" in its English targets."""
    en = ["Script|Cherokee", "female^lawful", "Edit|Posting Profiles"]
    other = ["Chữ Cherokee", "trung lập", "Sửa|Hồ sơ"]  # the last: a translation keeping its bar keeps the English's
    for langs in (("vi", "en"), ("de", "en")):
        table = pa.table({"src": other, "tgt": en, "origin": ["po"] * 3, "id": ["1", "2", "3"]})
        cfg = build_config([{"NonEmpty": {}}]).with_languages(*langs)
        kept, _, report = clean_table(table, cfg)
        assert kept["tgt"].to_pylist() == ["Cherokee", "lawful", "Edit|Posting Profiles"], langs
        assert kept["src"].to_pylist() == other
    mirror = pa.table({"src": en, "tgt": other, "origin": ["po"] * 3, "id": ["1", "2", "3"]})
    kept, _, _ = clean_table(mirror, build_config([{"NonEmpty": {}}]).with_languages("en", "vi"))
    assert kept["src"].to_pylist() == ["Cherokee", "lawful", "Edit|Posting Profiles"]


def test_a_pair_set_by_a_rules_files_language_rule_is_recorded_for_the_stages_after(tmp_path):
    """`clean --config rules.yaml` whose LanguageID says de-en cleaned the corpus as de-en, but only --langs was
    recorded: align_filter and training then read the kept pairs as en-vi."""
    from mtcore.runs import languages_of

    (tmp_path / "rules.yaml").write_text("rules:\n  - NonEmpty\n  - LanguageID: {languages: [de, en]}\n")
    cfg = load_config(tmp_path / "rules.yaml")
    assert cfg.languages == ("de", "en") and cfg.to_dict()["languages"] == ["de", "en"]
    (tmp_path / "kept").mkdir()
    (tmp_path / "report.json").write_text(json.dumps({"config": cfg.to_dict()}))
    assert tuple(languages_of(tmp_path / "kept", None)) == ("de", "en")
    assert "languages" not in load_config().to_dict()  # the default stage keeps its keys


def test_langs_en_vi_is_the_default_stage_and_a_change_is_named_by_its_rule():
    """`clean --langs en-vi` was refused beside a run without --langs (languages None -> [en, vi]), printing the
    whole list of rules twice."""
    from mtcore.runs import _flatten

    assert load_config().with_languages("EN", "vi").to_dict() == load_config().to_dict()
    before, after = _flatten(load_config().to_dict()), _flatten(load_config().with_languages("de", "en").to_dict())
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == ["languages", "rules.LanguageID.languages", "rules.TestOverlap.languages"]
