"""mtcore.runs: a stage is reused only when its settings, code and input contents are the same."""

from __future__ import annotations

import json

import pytest

from mtcore.cleaning import build_config, clean_dataset
from mtcore.runs import MANIFEST, Stage, StageError, content_hash, home


def make(stage: Stage, text: str = "out") -> None:
    with stage.writing() as work:
        (work / "result.txt").write_text(text)
        stage.finish({"rows": len(text)})


def test_same_settings_and_inputs_are_reused(tmp_path):
    src = tmp_path / "in.tsv"
    src.write_text("a\tb\n")
    stage = Stage(tmp_path / "s", "demo", {"k": 1}, {"corpus": src})
    assert stage.reuse() is None
    make(stage)
    again = Stage(tmp_path / "s", "demo", {"k": 1}, {"corpus": src})
    assert again.reuse() == {"rows": 3}
    assert json.loads((tmp_path / "s" / MANIFEST).read_text())["inputs"]["corpus"]["path"] == str(src)


@pytest.mark.parametrize("change, message", [
    ("settings", "setting `rules.max_ratio`: 3 -> 2"),
    ("contents", "input `corpus` {src}: its contents changed"),
    ("input", "input `corpus` {other}: another input"),
])
def test_another_fingerprint_is_refused_naming_what_changed(tmp_path, change, message):
    src, other = tmp_path / "in.tsv", tmp_path / "other.tsv"
    src.write_text("a\tb\n" * 500)
    other.write_text("c\td\n")
    make(Stage(tmp_path / "s", "demo", {"rules": {"max_ratio": 3}}, {"corpus": src}))
    settings, inputs = {"rules": {"max_ratio": 3}}, {"corpus": src}
    if change == "settings":
        settings = {"rules": {"max_ratio": 2}}
    elif change == "contents":
        src.write_text("a\tb\n" * 100)  # cut in place: same path, other rows
    else:
        inputs = {"corpus": other}
    stage = Stage(tmp_path / "s", "demo", settings, inputs)
    with pytest.raises(StageError, match="--overwrite") as err:
        stage.reuse()
    assert message.format(src=src, other=other) in str(err.value)
    assert stage.reuse(overwrite=True) is None
    make(stage, "new")
    assert (tmp_path / "s" / "result.txt").read_text() == "new"


def test_an_interrupted_stage_leaves_the_old_output_whole(tmp_path):
    make(Stage(tmp_path / "s", "demo", {"k": 1}))
    stage = Stage(tmp_path / "s", "demo", {"k": 2})
    with pytest.raises(KeyboardInterrupt):
        with stage.writing() as work:
            (work / "result.txt").write_text("half")
            raise KeyboardInterrupt
    assert (tmp_path / "s" / "result.txt").read_text() == "out"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no partial folder left behind


def test_a_folder_of_other_files_is_not_taken_over(tmp_path):
    """Not even with --overwrite: a stage replaces its own output, never a folder of the user's."""
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "notes.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(StageError, match=r"no mtcore stage made \(notes.txt\).*even with --overwrite"):
            Stage(tmp_path / "s", "demo").reuse(overwrite=overwrite)
    assert (tmp_path / "s" / "notes.txt").read_text() == "mine"


def test_hidden_files_are_a_users_too(tmp_path):
    """A `.env` or `.git` in the output folder went with the folder, without --overwrite; desktop litter may go."""
    (tmp_path / "s" / ".git").mkdir(parents=True)
    (tmp_path / "s" / ".env").write_text("TOKEN=1")
    with pytest.raises(StageError, match=r"no mtcore stage made \(.env, .git\)"):
        Stage(tmp_path / "s", "demo").reuse(overwrite=True)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / ".DS_Store").write_text("")
    stage = Stage(tmp_path / "t", "demo")
    assert stage.reuse() is None
    make(stage)


def test_files_the_user_added_to_a_stage_folder_are_never_replaced_with_it(tmp_path):
    """The folder is swapped whole: a user's notes inside it went with an --overwrite (also behind a damaged
    manifest). What the command itself adds afterwards (`extras`: text exports, plots) does not count."""
    stage = Stage(tmp_path / "s", "demo", {"k": 1}, extras=("kept.*",))
    make(stage)
    (tmp_path / "s" / "kept.tsv").write_text("a\tb\n")
    assert Stage(tmp_path / "s", "demo", {"k": 2}, extras=("kept.*",)).reuse(overwrite=True) is None
    (tmp_path / "s" / "analysis.md").write_text("mine")
    assert Stage(tmp_path / "s", "demo", {"k": 1}, extras=("kept.*",)).reuse() is not None  # reused: nothing replaced
    for overwrite in (False, True):
        with pytest.raises(StageError, match=r"also holds files its stage did not make \(analysis.md\).*move them out"):
            Stage(tmp_path / "s", "demo", {"k": 2}, extras=("kept.*",)).reuse(overwrite=overwrite)
    (tmp_path / "s" / "result.txt").unlink()  # a missing output is made again, but not over the user's file either
    with pytest.raises(StageError, match="analysis.md"):
        Stage(tmp_path / "s", "demo", {"k": 1}, extras=("kept.*",)).reuse()
    (tmp_path / "s" / MANIFEST).write_text("garbage{")
    with pytest.raises(StageError, match="analysis.md"):
        Stage(tmp_path / "s", "demo", {"k": 1}).reuse(overwrite=True)
    assert (tmp_path / "s" / "analysis.md").read_text() == "mine"


def test_two_runs_into_one_output_never_mix(tmp_path):
    """Two runs judged the empty folder at once: the second to write is refused, while the first writes (the lock)
    and after it (the folder is no longer what it judged); the first's output stands whole."""
    first, second = Stage(tmp_path / "s", "demo", {"k": 1}), Stage(tmp_path / "s", "demo", {"k": 2})
    assert first.reuse() is None and second.reuse() is None
    with first.writing() as work:
        (work / "result.txt").write_text("first")
        with pytest.raises(StageError, match=r"another mtcore run \(pid \d+\) is writing it now"):
            with second.writing():
                pass
        first.finish({"rows": 1})
    with pytest.raises(StageError, match="another run wrote it while this one was starting"):
        with second.writing():
            pass
    assert (tmp_path / "s" / "result.txt").read_text() == "first"
    assert json.loads((tmp_path / "s" / MANIFEST).read_text())["settings"] == {"k": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no lock or partial folder left
    third = Stage(tmp_path / "s", "demo", {"k": 1})
    assert third.reuse() == {"rows": 1}


def test_an_older_mtcore_stage_folder_is_replaced_with_overwrite(tmp_path):
    """`runs/clean` as pipelines/clean.py wrote it before stages had manifests: kept/, rejects/, report.json."""
    old = tmp_path / "clean"
    (old / "kept").mkdir(parents=True)
    (old / "rejects").mkdir()
    (old / "report.json").write_text("{}")
    (old / ".DS_Store").write_text("")
    with pytest.raises(StageError, match="made by an earlier mtcore"):
        Stage(old, "clean", {"k": 1}).reuse()
    assert Stage(old, "clean", {"k": 1}).reuse(overwrite=True) is None
    (old / "notes.txt").write_text("mine")  # ... but not once the user keeps files there
    with pytest.raises(StageError, match="no mtcore stage made"):
        Stage(old, "clean", {"k": 1}).reuse(overwrite=True)


def test_a_stage_whose_outputs_were_deleted_is_made_again(tmp_path, caplog):
    stage = Stage(tmp_path / "s", "demo", {"k": 1})
    make(stage)
    assert Stage(tmp_path / "s", "demo", {"k": 1}).reuse() is not None
    (tmp_path / "s" / "result.txt").unlink()
    with caplog.at_level("WARNING", logger="mtcore.runs"):
        assert Stage(tmp_path / "s", "demo", {"k": 1}).reuse() is None  # no --overwrite needed: the folder is its own
    assert "result.txt is missing; making it again" in caplog.text


def test_a_damaged_manifest_is_still_a_stage_folder(tmp_path):
    """Its list of outputs is lost with it: a stage's usual files (kept/, rejects/, report.json ...) are taken as its."""
    stage = Stage(tmp_path / "s", "demo", {"k": 1})
    with stage.writing() as work:
        (work / "report.json").write_text("{}")
        stage.finish({})
    (tmp_path / "s" / "_stage.json").write_text("{not json")
    with pytest.raises(StageError, match="pass --overwrite"):
        Stage(tmp_path / "s", "demo", {"k": 1}).reuse()
    assert Stage(tmp_path / "s", "demo", {"k": 1}).reuse(overwrite=True) is None


def test_an_input_given_before_and_not_now_is_named(tmp_path):
    ref = tmp_path / "ref.tsv"
    ref.write_text("Open\tMở\n")
    make(Stage(tmp_path / "s", "demo", {"k": 1}, inputs={"reference": ref}))
    with pytest.raises(StageError, match=r"input `reference` .*ref.tsv: not given this time"):
        Stage(tmp_path / "s", "demo", {"k": 1}).reuse()


def test_the_current_directory_is_never_a_stage_output(tmp_path, monkeypatch):
    """A stage swaps its folder in whole: with `--output .` the shell's directory would be moved away."""
    from mtcore.checks import UsageError, output_apart

    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    for output in (".", str(tmp_path)):
        with pytest.raises(UsageError, match="is \\(or holds\\) the current directory"):
            output_apart(output, {})
    output_apart("runs/x", {})


def test_content_hash_sees_edits_not_renames(tmp_path):
    a = tmp_path / "a.tsv"
    a.write_text("x\ty\n")
    h = content_hash(a)
    b = tmp_path / "b.tsv"
    a.rename(b)
    assert content_hash(b) == h
    b.write_text("x\tz\n")
    assert content_hash(b) != h


def test_a_folders_hash_leaves_out_what_the_reader_skips(tmp_path):
    """A file below a `_`- or `.`-prefixed folder (a `_tmp/` of a writer, `.cache/`) is no part of the corpus: adding
    one refused the stage as made from another input."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mtcore.data.corpus import parquet_parts

    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    pq.write_table(pa.table({"src": ["Open"], "tgt": ["Mở"]}), corpus / "sub" / "part-0.parquet")
    h = content_hash(corpus)
    for skipped in ("_tmp", ".cache"):
        (corpus / skipped).mkdir()
        pq.write_table(pa.table({"src": ["Save"], "tgt": ["Lưu"]}), corpus / skipped / "p.parquet")
    assert content_hash(corpus) == h and len(parquet_parts(corpus)) == 1
    pq.write_table(pa.table({"src": ["Save"], "tgt": ["Lưu"]}), corpus / "sub" / "part-1.parquet")
    assert content_hash(corpus) != h


def test_home_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "h"))
    assert home() == tmp_path / "h" and home(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("MTCORE_HOME")
    monkeypatch.chdir(tmp_path)
    assert home() == tmp_path / "runs"


def test_clean_reuses_or_refuses(ray_local, tmp_path):
    """The issue's cases: other rules, another input, an input cut in place."""
    tsv = tmp_path / "c.tsv"
    tsv.write_text("Open the file\tMở tập tin\nSave the file\tLưu tập tin\nClose\tĐóng\n", encoding="utf-8")
    out = tmp_path / "clean"
    first = clean_dataset(tsv, out)
    assert not first.skipped and first.report["input"] == 3
    assert clean_dataset(tsv, out).skipped
    with pytest.raises(StageError, match="setting `rules"):
        clean_dataset(tsv, out, build_config({"rules": [{"NonEmpty": {}}]}))
    tsv.write_text("Open the file\tMở tập tin\n", encoding="utf-8")  # cut to one row in place
    with pytest.raises(StageError, match="its contents changed"):
        clean_dataset(tsv, out)
    other = tmp_path / "d.tsv"
    other.write_text("Quit\tThoát\n", encoding="utf-8")
    with pytest.raises(StageError, match="another input"):
        clean_dataset(other, out)
    assert json.loads((out / "report.json").read_text())["input"] == 3  # the old report stands, whole
    assert clean_dataset(tsv, out, overwrite=True).report["input"] == 1


def test_clean_counts_held_out_sets_by_contents_not_paths(ray_local, tmp_path):
    """A moved or second checkout (the embedded dev/test at another path) reuses the cleaned corpus;
    an edited held-out set makes it again, named."""
    tsv = tmp_path / "c.tsv"
    tsv.write_text("Open the file\tMở tập tin\nSave the file\tLưu tập tin\nClose\tĐóng\n", encoding="utf-8")
    for d in ("checkout-a", "checkout-b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "test.tsv").write_text("Close\tĐóng\n", encoding="utf-8")
    rules = lambda d: build_config({"rules": [{"TestOverlap": {"paths": [str(tmp_path / d / "test.tsv")]}}]})  # noqa: E731
    out = tmp_path / "clean"
    first = clean_dataset(tsv, out, rules("checkout-a"))
    assert not first.skipped and first.report["kept"] == 2
    assert clean_dataset(tsv, out, rules("checkout-b")).skipped
    (tmp_path / "checkout-b" / "test.tsv").write_text("Open the file\tMở tập tin\n", encoding="utf-8")
    with pytest.raises(StageError, match="input `heldout_0`"):
        clean_dataset(tsv, out, rules("checkout-b"))
    assert clean_dataset(tsv, out, rules("checkout-b"), overwrite=True).report["kept"] == 2


def test_training_default_corpus_is_its_own_stage_and_is_remade(ray_local, tmp_path, monkeypatch, caplog):
    """Not runs/clean (another corpus may sit there); made again, not refused, when its input changes.
    The warning says what changed, not the `--overwrite` advice meant for a stage's own command."""
    from mtcore.distributed import ray_training
    from mtcore.distributed.jobs import TrainingJob

    raw = tmp_path / "raw.tsv"
    raw.write_text("Open the file\tMở tập tin\nSave the file\tLưu tập tin\n", encoding="utf-8")
    monkeypatch.setattr(ray_training, "RAW_PARALLEL", raw)
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    first = ray_training.resolve_train_data(TrainingJob())
    assert first == str(tmp_path / "runs" / "clean-embedded" / "kept")
    raw.write_text("Close the window\tĐóng cửa sổ\n", encoding="utf-8")  # a new release of the embedded data
    with caplog.at_level("WARNING", logger="mtcore.distributed.ray_training"):
        assert ray_training.resolve_train_data(TrainingJob()) == first
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "cleaning the embedded corpus again" in warning and "input `corpus`" in warning
    assert "--overwrite" not in warning
    assert json.loads((tmp_path / "runs" / "clean-embedded" / "report.json").read_text())["input"] == 1


def test_a_stage_never_writes_over_its_own_input(tmp_path):
    """`--input runs/clean --output runs/clean` (or a corpus file inside the output): with --overwrite the stage
    would replace the data it reads. Refused first, in one line, whatever the settings."""
    from mtcore.checks import UsageError, output_apart

    corpus = tmp_path / "work" / "c.tsv"
    corpus.parent.mkdir()
    corpus.write_text("Open\tMở\n", encoding="utf-8")
    stage = Stage(tmp_path / "work", "clean", settings={"a": 1}, inputs={"corpus": corpus})
    with pytest.raises(UsageError, match="holds the input corpus"):
        stage.reuse(overwrite=True)
    assert corpus.is_file()
    with pytest.raises(UsageError, match="lies inside the input --mono"):
        output_apart(tmp_path / "work" / "out", {"--mono": tmp_path / "work"})
    output_apart(tmp_path / "elsewhere", {"corpus": corpus, "prefix": tmp_path / "work" / "c"})  # apart: no error
    output_apart(tmp_path / "work" / "out", {"corpus": corpus})  # beside the input file, in its folder: fine


def test_an_in_place_edit_of_a_13_mb_corpus_is_seen(tmp_path):
    """Same size, away from the start, middle and end: a sampled hash missed it (it sampled files over 8 MiB)."""
    big = tmp_path / "big.tsv"
    data = bytearray(b"Open the file\tMo tep\n" * 650_000)  # 13.6 MB
    big.write_bytes(data)
    before = content_hash(big)
    data[3_000_000:3_000_004] = b"Save"
    big.write_bytes(data)
    assert content_hash(big) != before


def test_a_same_size_edit_of_a_sampled_file_between_its_samples_is_seen(tmp_path, monkeypatch):
    """Files over 1 GiB are hashed by samples: a same-size fix between them (sed -i 's/colour/color/') was reused as
    unchanged. Their modification time is part of the hash (sizes scaled down: 1 KiB hashed whole, 64 B samples)."""
    import os

    from mtcore import runs

    monkeypatch.setattr(runs, "_WHOLE_FILE", 1024)
    monkeypatch.setattr(runs, "_SAMPLE", 64)
    big = tmp_path / "big.tsv"
    data = bytearray(b"Open the colour file\tMo tep\n" * 100)
    big.write_bytes(data)
    os.utime(big, ns=(1_000_000_000, 1_000_000_000))
    before = content_hash(big)
    data[len(data) // 4:len(data) // 4 + 4] = b"Save"
    big.write_bytes(data)
    assert content_hash(big) != before


def test_a_moses_prefix_is_its_language_files_named_literally(tmp_path):
    """`corpus[v2]` is a name, not a glob pattern (it hashed no file at all, so edits went unseen); a
    PREFIX.tok.en sibling or a PREFIX.bpe folder is not part of the corpus."""
    from mtcore.runs import input_files

    prefix = tmp_path / "corpus[v2]"
    for lang, text in (("en", "Open the file\n"), ("vi", "Mở tập tin\n")):
        prefix.with_name(f"corpus[v2].{lang}").write_text(text, encoding="utf-8")
    prefix.with_name("corpus[v2].tok.en").write_text("Open the file\n")
    prefix.with_name("corpus[v2].bpe").mkdir()
    (tmp_path / "corpusv.en").write_text("not mine\n")  # what the glob `corpus[v2].*` would have matched
    prefix.with_name("corpus[v2].tsv").write_text("Open the file\tMở tập tin\n", encoding="utf-8")  # another corpus
    assert [p.name for p in input_files(prefix)] == ["corpus[v2].en", "corpus[v2].vi"]
    before = content_hash(prefix)
    assert before != content_hash(tmp_path / "missing")
    prefix.with_name("corpus[v2].vi").write_text("Mở TỆP\n", encoding="utf-8")
    assert content_hash(prefix) != before


def test_a_moses_prefix_of_a_language_pair_is_those_two_files(tmp_path):
    """OPUS ships PREFIX.ids beside PREFIX.en and PREFIX.vi, and a folder may hold PREFIX.log or a third language:
    editing those refused a rerun of the en-vi cleaning as "its contents changed"."""
    from mtcore.runs import input_files

    prefix = tmp_path / "train"
    prefix.with_name("train.en").write_text("Open the file\nSave the file as\n", encoding="utf-8")
    prefix.with_name("train.vi").write_text("Mở tập tin\nLưu tập tin thành\n", encoding="utf-8")
    for other in ("train.ids", "train.log", "train.de"):
        prefix.with_name(other).write_text("x\n")
    assert [p.name for p in input_files(prefix, ("en", "vi"))] == ["train.en", "train.vi"]
    before = content_hash(prefix, ("en", "vi"))
    for other in ("train.ids", "train.log", "train.de"):
        prefix.with_name(other).write_text("y\n")
    assert content_hash(prefix, ("en", "vi")) == before
    prefix.with_name("train.vi").write_text("Mở TỆP\nLưu tập tin thành\n", encoding="utf-8")
    assert content_hash(prefix, ("en", "vi")) != before

    def fingerprint():  # what the cleaning and filter stages compare: a sibling's edit is not a change
        return Stage(tmp_path / "out", "clean", inputs={"corpus": prefix}, languages=("en", "vi")).fingerprint

    first = fingerprint()
    prefix.with_name("train.ids").write_text("z\n")
    assert fingerprint() == first


def test_a_gzipped_moses_prefix_is_its_files_and_counts_by_contents(tmp_path):
    import gzip

    from mtcore.runs import input_files

    for lang, text in (("en", b"Hello world\n"), ("vi", "Xin chào\n".encode())):
        (tmp_path / f"held.{lang}.gz").write_bytes(gzip.compress(text))
    assert [p.name for p in input_files(tmp_path / "held")] == ["held.en.gz", "held.vi.gz"]
    before = content_hash(tmp_path / "held")
    (tmp_path / "held.vi.gz").write_bytes(gzip.compress("Chào\n".encode()))
    assert content_hash(tmp_path / "held") != before


def test_a_prefix_is_hashed_by_the_files_the_reader_opens(tmp_path):
    """The reader finds `Train.en` for the prefix `train` and `c.en.GZ` in any case, and reads `c.en` over a
    `c.en.gz` beside it: the hash covers exactly those files. Before, a case mismatch hashed no file at all, so
    another corpus reused the first one's output."""
    import gzip

    from mtcore.data.corpus import read_corpus
    from mtcore.runs import input_files

    (tmp_path / "Train.en").write_text("Open the file\n", encoding="utf-8")
    (tmp_path / "Train.vi").write_text("Mở tập tin\n", encoding="utf-8")
    assert read_corpus(tmp_path / "train")["tgt"].to_pylist() == ["Mở tập tin"]
    assert [p.name for p in input_files(tmp_path / "train", ("en", "vi"))] == ["Train.en", "Train.vi"]
    before = content_hash(tmp_path / "train", ("en", "vi"))
    (tmp_path / "Train.vi").write_text("Đóng tập tin\n", encoding="utf-8")
    assert content_hash(tmp_path / "train", ("en", "vi")) != before
    for lang, text in (("en", "Quit\n"), ("vi", "Thoát\n")):
        (tmp_path / f"c.{lang}.GZ").write_bytes(gzip.compress(text.encode()))
    assert [p.name for p in input_files(tmp_path / "c")] == ["c.en.GZ", "c.vi.GZ"]
    (tmp_path / "c.en").write_text("Quit\n", encoding="utf-8")
    assert [p.name for p in input_files(tmp_path / "c", ("en", "vi"))] == ["c.en", "c.vi.GZ"]
