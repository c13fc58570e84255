"""`mtcore.tracking.run`: the one way a stage opens, logs to and ends an MLflow run (a real SQLite store)."""

from __future__ import annotations

import pickle

import mlflow
import pytest

from mtcore.tracking.run import SafeLogger, TrackedRun, end_orphaned_runs, open_run, open_run_with_pointer, tracked_run


def test_a_finished_body_ends_the_run_finished_with_its_tags_params_and_metrics(mlflow_uri, tmp_path):
    (tmp_path / "report.json").write_text("{}")
    with tracked_run("stage", "clean-x", tags={"mtcore.kind": "clean"}, params={"rules.min": 3}) as run:
        run.log_metrics({"kept": 5, "input": 7}, step=1)
        run.log_artifact(tmp_path / "report.json")
        assert run.status() == "RUNNING"
    got = mlflow.MlflowClient(mlflow_uri).get_run(run.run_id)
    assert got.info.status == "FINISHED" and got.info.run_name == "clean-x"
    assert got.data.tags["mtcore.kind"] == "clean" and got.data.params == {"rules.min": "3"}
    assert got.data.metrics == {"kept": 5.0, "input": 7.0}
    assert [a.path for a in mlflow.MlflowClient(mlflow_uri).list_artifacts(run.run_id)] == ["report.json"]


def test_an_error_in_the_body_ends_the_run_failed_and_goes_on(mlflow_uri):
    with pytest.raises(ValueError, match="bad row"):
        with tracked_run("stage", "align") as run:
            raise ValueError("bad row")
    assert mlflow.MlflowClient(mlflow_uri).get_run(run.run_id).info.status == "FAILED"


def test_continue_named_reopens_the_newest_run_of_that_name_and_keeps_its_params(mlflow_uri):
    first = open_run("train", "job-a", params={"lr": 1})
    first.end("KILLED")
    again = open_run("train", "job-a", params={"lr": 2}, continue_named=True)
    assert again.run_id == first.run_id and again.status() == "RUNNING"
    assert mlflow.MlflowClient(mlflow_uri).get_run(again.run_id).data.params == {"lr": "1"}
    other = open_run("train", "job-a")  # without continue_named: a new run
    assert other.run_id != first.run_id


def test_children_are_found_by_tag_and_a_run_pickles_without_its_client(mlflow_uri):
    parent = open_run("tune", "search")
    child = open_run("tune", "trial", parent=parent, tags={"mtcore.tune.trial_id": "t1"})
    assert {k: r.run_id for k, r in parent.children("mtcore.tune.trial_id").items()} == {"t1": child.run_id}
    child.metrics()  # builds the client
    copy = pickle.loads(pickle.dumps(child))
    assert copy == child and copy._client is None and copy.tags()["mlflow.parentRunId"] == parent.run_id


def test_a_stage_folder_owns_its_run_through_a_pointer_file(mlflow_uri, tmp_path):
    a = open_run_with_pointer("bt", "bt-beam", tmp_path / "a" / "_mlflow_run.json")
    b = open_run_with_pointer("bt", "bt-beam", tmp_path / "b" / "_mlflow_run.json")  # same name, other folder
    a.end()
    again = open_run_with_pointer("bt", "bt-beam", tmp_path / "a" / "_mlflow_run.json")
    assert again.run_id == a.run_id != b.run_id and again.status() == "RUNNING"


def test_the_training_logger_skips_step_keys_and_survives_a_dead_store(mlflow_uri, caplog):
    run = open_run("train", "curves")
    SafeLogger(run)({"step": 10, "epoch": 0, "train/loss": 2.5}, 10)
    assert [(m.step, m.value) for m in mlflow.MlflowClient(mlflow_uri).get_metric_history(run.run_id, "train/loss")] == [(10, 2.5)]
    assert run.metrics() == {"train/loss": 2.5}
    dead = SafeLogger(TrackedRun("sqlite:////nonexistent/dir/x.db", run.run_id))
    dead({"train/loss": 1.0}, 11)
    dead({"train/loss": 0.5}, 12)  # warned once, then silent
    assert dead.failed and sum("MLflow logging failed" in r.message for r in caplog.records) == 1


def test_runs_left_running_by_a_killed_process_are_ended_by_the_next_run(mlflow_uri, caplog):
    """`kill -9` (or the OOM killer) leaves no chance to end a run: it stayed RUNNING in the UI for ever. The next run
    of the experiment on this machine ends it KILLED and says why; a trial whose search is still open is the
    search's to close."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    alive_parent = open_run("tune", "search-in-progress")
    script = ("import os, signal, sys\nfrom mtcore.tracking.run import open_run\n"
              "dead = open_run('train', 'killed-job'); open_run('train', 'its-child', parent=dead)\n"
              f"open_run('tune', 'trial', parent='{alive_parent.run_id}')\n"
              "print(dead.run_id, flush=True); os.kill(os.getpid(), signal.SIGKILL)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == -9, proc.stderr
    client = mlflow.MlflowClient(mlflow_uri)
    dead = client.get_run(proc.stdout.split()[0])
    assert dead.info.status == "RUNNING"  # nothing could end it
    with caplog.at_level("WARNING", logger="mtcore.tracking.run"):
        open_run("train", "next-job").end()
    by_name = {r.info.run_name: r for r in client.search_runs([dead.info.experiment_id])}
    assert by_name["killed-job"].info.status == by_name["its-child"].info.status == "KILLED"
    assert "ended without closing this run" in by_name["killed-job"].data.tags["mtcore.end_reason"]
    assert "killed-job" in caplog.text and "marked KILLED" in caplog.text
    resumed = open_run("train", "killed-job", continue_named=True)  # a resume: no longer "ended by a later run"
    assert "mtcore.end_reason" not in resumed.tags() and resumed.status() == "RUNNING"
    resumed.end()
    tune_id = client.get_run(alive_parent.run_id).info.experiment_id
    assert end_orphaned_runs(client, tune_id) == []
    trial = client.search_runs([tune_id], filter_string="attributes.run_name = 'trial'")
    assert trial[0].info.status == "RUNNING"  # its search (this process) is open: left to it
    alive_parent.end("KILLED")
    assert end_orphaned_runs(client, tune_id) == [trial[0].info.run_id]


def test_ctrl_c_says_which_runs_it_ended_and_claims_none_it_did_not(mlflow_uri, capsys, monkeypatch):
    """"an MLflow run it had open is marked KILLED" was printed after any Ctrl-C, also by a command with no run."""
    from mtcore import tracking
    from mtcore.errors import EXIT_INTERRUPTED, entry_point

    monkeypatch.setattr(tracking, "_open_runs", {})  # as in a new process: the runs other tests left open are not these

    @entry_point
    def no_run(argv=None):
        raise KeyboardInterrupt

    assert no_run([]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "interrupted (Ctrl-C)\n"

    @entry_point
    def with_run(argv=None):
        with_run.run = open_run("stage", "interrupted-stage")
        raise KeyboardInterrupt

    assert with_run([]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err.splitlines()[-1] == "interrupted (Ctrl-C); the MLflow run it had open is marked KILLED"
    assert mlflow.MlflowClient(mlflow_uri).get_run(with_run.run.run_id).info.status == "KILLED"
