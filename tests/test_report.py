"""`python -m mtcore.report`: the leaderboard by test BLEU, read from a real MLflow store."""

from __future__ import annotations

import mlflow
import pytest

from mtcore import tracking

from mtcore.tracking import report

SIG = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"


def _run(client, exp_id, name, *, metrics=None, params=None, tags=None, status="FINISHED", parent=None):
    tags = dict(tags or {})
    if parent:
        tags["mlflow.parentRunId"] = parent
    run = client.create_run(exp_id, run_name=name, tags=tags)
    for k, v in (params or {}).items():
        client.log_param(run.info.run_id, k, v)
    for k, values in (metrics or {}).items():
        for step, v in enumerate(values if isinstance(values, list) else [values]):
            client.log_metric(run.info.run_id, k, v, step=step)
    client.set_terminated(run.info.run_id, status=status)
    return run.info.run_id


PARAMS = {"model.arch": "transformer", "model.d_model": "256", "model.layers": "3", "model.heads": "4", "train.warmup": "300",
          "train.label_smoothing": "0.1", "model.src_lang": "en", "model.tgt_lang": "vi", "job.test_data": "t.parquet"}


@pytest.fixture
def store(mlflow_uri):
    """Runs as the entry points leave them: training runs, a Tune search with trials, a pipeline run."""
    client = mlflow.MlflowClient(mlflow_uri)
    tags = {"mtcore.data_version": "c0a531a0b114", "mtcore.git_commit": "abc1234", "sacrebleu.bleu_signature": SIG}
    train = tracking.setup("train_transformer").get_experiment_by_name("train_transformer").experiment_id
    _run(client, train, "transformer-d256-L3-h4-w300", metrics={"test/bleu": 12.5, "test/chrf": 30.1, "dev/bleu": [3.0, 11.0, 9.0]},
         params=PARAMS, tags=tags)
    _run(client, train, "transformer-d256-L3-h4-w1000", metrics={"test/bleu": 14.25, "test/chrf": 33.0, "dev/bleu": [12.0]},
         params=PARAMS | {"train.warmup": "1000"}, tags=tags)
    tune = tracking.setup("tune_transformer").get_experiment_by_name("tune_transformer").experiment_id
    parent = _run(client, tune, "tune-transformer-heads", metrics={"best/test_bleu": 9.0})
    _run(client, tune, "t00000-h8", metrics={"test/bleu": 9.0, "dev/bleu": [8.0]}, params=PARAMS | {"model.heads": "8"},
         tags=tags, parent=parent)
    _run(client, tune, "t00001-h2", metrics={"dev/bleu": [0.5]}, params=PARAMS | {"model.heads": "2"}, tags=tags,
         status="KILLED", parent=parent)
    align = tracking.setup("align_filter").get_experiment_by_name("align_filter").experiment_id
    _run(client, align, "align_filter-kept-margin", metrics={"kept": 100.0})
    return mlflow_uri


def test_all_experiments_ranked_by_test_bleu(store):
    board = report.build(store)
    assert [r.run_name for r in board.ranked] == ["transformer-d256-L3-h4-w1000", "transformer-d256-L3-h4-w300", "t00000-h8"]
    top = board.ranked[0]
    assert (top.test_bleu, top.test_chrf, top.dev_bleu) == (14.25, 33.0, 12.0)
    assert board.ranked[1].dev_bleu == 11.0  # the best dev BLEU of the run, not the last
    assert top.settings.startswith("transformer d256 L3 h4 w1000 ls=0.1") and top.direction == "en→vi"
    assert (top.data_version, top.commit, top.signature) == ("c0a531a0b114", "abc1234", SIG)
    assert board.ranked[2].parent == "tune-transformer-heads"
    assert [(r.run_name, r.status) for r in board.unscored] == [("t00001-h2", "KILLED")]
    assert board.other_runs == {"align_filter": 1, "tune_transformer": 1}  # the pipeline run and the search's parent

    text = report.to_text(board)
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("1 "))
    assert "transformer-d256-L3-h4-w1000" in lines[first] and "14.25" in lines[first] and "33.00" in lines[first]
    assert "transformer-d256-L3-h4-w300" in lines[first + 1] and "12.50" in lines[first + 1]
    assert "Without test BLEU (1):" in text and "KILLED" in text
    assert f"sacreBLEU signature (3 runs): {SIG}" in text and "not comparable" not in text


def test_one_experiment_and_files(store, tmp_path):
    board = report.build(store, "tune_transformer")
    assert board.experiments == ["tune_transformer"]
    assert [r.run_name for r in board.ranked] == ["t00000-h8"]
    # With one experiment named too, the search's own run is not listed as a run without BLEU: its trials are
    assert [r.run_name for r in board.unscored] == ["t00001-h2"] and board.other_runs == {"tune_transformer": 1}
    md, page = report.write(board, tmp_path / "out", ui_url="http://127.0.0.1:5000")
    md_text, html_text = md.read_text(), page.read_text()
    assert md_text.startswith("# Leaderboard by test BLEU")
    run_id = board.ranked[0].run_id
    link = f"http://127.0.0.1:5000/#/experiments/{board.ranked[0].experiment_id}/runs/{run_id}"
    assert f"| 1 | tune_transformer | [t00000-h8]({link}) | 9.00 |" in md_text
    assert f'<a href="{link}">t00000-h8</a>' in html_text and "<td>9.00</td>" in html_text
    assert "<h2>Without test BLEU (1)</h2>" in html_text


def test_mixed_signatures_are_flagged(mlflow_uri):
    client = mlflow.MlflowClient(mlflow_uri)
    exp = tracking.setup("sigs").get_experiment_by_name("sigs").experiment_id
    _run(client, exp, "a", metrics={"test/bleu": 1.0}, tags={"sacrebleu.bleu_signature": SIG})
    _run(client, exp, "b", metrics={"test/bleu": 2.0}, tags={"sacrebleu.bleu_signature": SIG.replace("13a", "intl")})
    assert "different sacreBLEU signatures and are not comparable" in report.to_text(report.build(mlflow_uri, "sigs"))


def test_empty_experiment(mlflow_uri):
    tracking.setup("empty")
    text = report.to_text(report.build(mlflow_uri, "empty"))
    assert "No run has a test BLEU yet." in text


def test_missing_experiment_names_it_and_lists_the_others(store):
    with pytest.raises(report.ReportError) as err:
        report.build(store, "tune_transfomer")
    message = str(err.value)
    assert message.startswith("experiment 'tune_transfomer' not found in sqlite:///")
    assert message.endswith("experiments there: Default, align_filter, train_transformer, tune_transformer")


def test_cli(store, tmp_path, capsys):
    assert report.main(["--experiment", "train_transformer", "--output", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "transformer-d256-L3-h4-w1000" in out and "14.25" in out
    assert (tmp_path / "rep" / "leaderboard.md").is_file() and (tmp_path / "rep" / "leaderboard.html").is_file()
    assert report.main(["--experiment", "nope", "--output", str(tmp_path / "rep2")]) == 2
    assert "error: experiment 'nope' not found" in capsys.readouterr().err
    assert not (tmp_path / "rep2").exists()


def test_only_comparable_finished_runs_are_ranked_together(mlflow_uri):
    """A review's store: a reverse (vi→en) model and a run on 20 test pairs ranked above en→vi runs on all pairs, a
    FAILED run ranked, and a NaN BLEU broke the order (30 ranked above 40)."""
    client = mlflow.MlflowClient(mlflow_uri)
    exp = tracking.setup("train_transformer").get_experiment_by_name("train_transformer").experiment_id
    tags = {"sacrebleu.bleu_signature": SIG}
    _run(client, exp, "a30", metrics={"test/bleu": 30.0}, params=PARAMS, tags=tags)
    _run(client, exp, "nan", metrics={"test/bleu": float("nan")}, params=PARAMS, tags=tags)
    _run(client, exp, "b40", metrics={"test/bleu": 40.0}, params=PARAMS, tags=tags)
    _run(client, exp, "failed50", metrics={"test/bleu": 50.0}, params=PARAMS, tags=tags, status="FAILED")
    _run(client, exp, "reverse60", metrics={"test/bleu": 60.0}, tags=tags,
         params=PARAMS | {"model.src_lang": "vi", "model.tgt_lang": "en"})
    _run(client, exp, "few70", metrics={"test/bleu": 70.0}, params=PARAMS | {"job.test_limit": "20"}, tags=tags)
    board = report.build(mlflow_uri, "train_transformer")
    ranked = [(rank, r.run_name) for rank, r in zip(board.ranks(), board.ranked)]
    assert ranked == [("1", "b40"), ("2", "a30"), ("1", "few70"), ("1", "reverse60")]  # a rank per direction and test set
    assert [r.run_name for r in board.ranked if r.group == ("en→vi", "t.parquet")] == ["b40", "a30"]
    assert {r.run_name for r in board.unscored} == {"nan", "failed50"}
    assert "Ranked within each direction and test set" in report.to_text(board)


def test_test_set_as_last_tested_ties_and_markdown_cells(mlflow_uri):
    """A review's store: a run tested again on another file kept its first `job.test_data` param, two files named
    test.tsv were one test set, tied BLEUs had ranks 3 and 4, and a run renamed with a newline or HTML broke the
    Markdown table."""
    import json

    client = mlflow.MlflowClient(mlflow_uri)
    exp = tracking.setup("train_transformer").get_experiment_by_name("train_transformer").experiment_id
    tags = {"sacrebleu.bleu_signature": SIG}
    on_a = {"mtcore.tested_with": json.dumps({"job.test_data": "aaaaaa11", "job.test_limit": 0, "path": "/x/a/test.tsv"})}
    on_b = {"mtcore.tested_with": json.dumps({"job.test_data": "bbbbbb22", "job.test_limit": 0, "path": "/x/b/test.tsv"})}
    _run(client, exp, "first", metrics={"test/bleu": 20.0}, params=PARAMS, tags=tags | on_a)
    _run(client, exp, "tie", metrics={"test/bleu": 20.001}, params=PARAMS, tags=tags | on_a)
    _run(client, exp, "third", metrics={"test/bleu": 10.0}, params=PARAMS, tags=tags | on_a)
    _run(client, exp, "line\nbreak <b>x</b>", metrics={"test/bleu": 30.0}, params=PARAMS, tags=tags | on_b)
    board = report.build(mlflow_uri, "train_transformer")
    by_name = {r.run_name: (rank, r.test_set) for rank, r in zip(board.ranks(), board.ranked)}
    assert by_name["first"] == ("1", "test.tsv #aaaaaa") and by_name["tie"][0] == "1" and by_name["third"][0] == "3"
    assert by_name["line\nbreak <b>x</b>"] == ("1", "test.tsv #bbbbbb")  # another file of the same name
    md = report.to_markdown(board)
    row = next(line for line in md.splitlines() if "break" in line)
    assert "line break \\<b\\>x\\</b\\>" in row and row.count("|") - row.count("\\|") == len(report.HEADERS) + 1


def test_a_store_given_as_a_path(store, tmp_path, monkeypatch):
    """`--store runs/mlflow.db` (a path, not a URI) reads that SQLite store; MLflow took a path for its folder store
    and failed with a traceback. `ui --help` creates no workspace."""
    from mtcore.tracking import TrackingError, ui

    db = store.removeprefix("sqlite:///")
    assert [r.run_name for r in report.build(db, "train_transformer").ranked] == \
        [r.run_name for r in report.build(store, "train_transformer").ranked] != []
    with pytest.raises(TrackingError, match="not a tracking store"):
        report.build(str(tmp_path), "train_transformer")
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "ws"))
    with pytest.raises(SystemExit):
        ui.main(["--help"])
    assert not (tmp_path / "ws").exists()


def test_a_test_limit_above_the_files_size_is_shown_as_the_pairs_scored(mlflow_uri):
    """`job.test_limit` 20 on a 3-pair file was shown as "20 pairs of it", and set it apart from the same 3 pairs
    scored under another limit."""
    import json

    client = mlflow.MlflowClient(mlflow_uri)
    exp = tracking.setup("limits").get_experiment_by_name("limits").experiment_id
    for name, limit in (("limit-20", 20), ("limit-50", 50)):
        tested = {"job.test_data": "cccccc33", "job.test_limit": limit, "path": "/x/test3.tsv", "pairs": 3}
        _run(client, exp, name, metrics={"test/bleu": 5.0}, params=PARAMS,
             tags={"sacrebleu.bleu_signature": SIG, "mtcore.tested_with": json.dumps(tested)})
    board = report.build(mlflow_uri, "limits")
    assert {r.test_set for r in board.ranked} == {"test3.tsv #cccccc (3 pairs of it)"}


def test_a_trial_stopped_early_is_reported_at_the_step_the_search_stopped_it(mlflow_uri):
    """Its Train run went on for seconds after the stop and logged a better dev BLEU than the trial the search picked."""
    client = mlflow.MlflowClient(mlflow_uri)
    exp = tracking.setup("stops").get_experiment_by_name("stops").experiment_id
    _run(client, exp, "stopped", metrics={"dev/bleu": [0.5, 1.1, 1.9]}, params=PARAMS, status="KILLED",
         tags={"mtcore.tune.stopped_early": "true", "mtcore.tune.stopped_at_step": "1"})
    _run(client, exp, "finished", metrics={"dev/bleu": [0.5, 1.1, 1.9]}, params=PARAMS)
    board = report.build(mlflow_uri, "stops")
    rows = {r.run_name: r for r in board.ranked + board.unscored}
    assert rows["stopped"].dev_bleu == 1.1 and rows["finished"].dev_bleu == 1.9
