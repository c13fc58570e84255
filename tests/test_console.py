"""What a user sees: mtcore's own lines, not Ray's or MLflow's; -q and -v; Ray Data's progress on one line."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from mtcore.console import QUIET, VERBOSE, RayDataProgress, verbosity_from_argv
from mtcore.data.paths import RAW_PARALLEL

ROOT = Path(__file__).resolve().parents[1]
# Lines other projects print: timestamps, Ray's "(pid=…)" worker prefixes, log levels, MLflow's and Ray's names.
FOREIGN = re.compile(r"^\d{4}[-/]\d\d[-/]\d\d|^\(|\bINFO\b|\bWARNING\b|mlflow\.|alembic|Token authentication|"
                     r"Downloading artifacts|logging_progress|Traceback")


def run_clean(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    """pipelines/clean.py on 200 real pairs, in a new workspace (first MLflow store), not on a terminal."""
    tsv = tmp_path / "c.tsv"
    if not tsv.exists():
        rows = pq.read_table(RAW_PARALLEL, columns=["src", "tgt"]).slice(5000, 200).to_pylist()
        tsv.write_text("".join(f"{' '.join(r['src'].split())}\t{' '.join(r['tgt'].split())}\n" for r in rows), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_"))}
    env["MTCORE_HOME"] = str(tmp_path / f"home{len(flags)}{''.join(flags)}")
    # One CPU: Ray Data's "no available CPUs" check then always runs before its own write task's CPU is back.
    return subprocess.run([sys.executable, str(ROOT / "pipelines" / "clean.py"), *flags, "--input", str(tsv), "--num-cpus", "1",
                           "--output", str(tmp_path / f"out{''.join(flags)}")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def test_a_200_pair_clean_prints_only_mtcore_lines(tmp_path):
    normal = run_clean(tmp_path)
    assert normal.returncode == 0, normal.stderr[-3000:]
    lines = (normal.stdout + normal.stderr).splitlines()
    assert not [line for line in lines if FOREIGN.search(line)], lines
    # What is coming is said before Ray starts (about 20 s before Ray Data's first progress line on a large corpus).
    assert lines[:2] == [f"cleaning 200 pairs of {tmp_path / 'c.tsv'} on Ray Data",
                         "started a local Ray instance of 1 CPUs"]
    assert "stage: clean" in lines and lines[-1].startswith("MLflow run ")
    assert normal.stderr == ""
    # What was kept quiet is real: -v shows Ray's own INFO lines, -q drops nothing but progress and notes.
    verbose = run_clean(tmp_path, "-v")
    assert verbose.returncode == 0 and [line for line in (verbose.stdout + verbose.stderr).splitlines() if FOREIGN.search(line)]
    quiet = run_clean(tmp_path, "-q")
    table = [line for line in normal.stdout.splitlines()[2:] if not line.startswith(("kept →", "MLflow run"))]
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout.splitlines()[: len(table)] == table


def test_verbosity_is_read_from_any_command_line():
    assert verbosity_from_argv(["--input", "x", "-q"]) == QUIET
    assert verbosity_from_argv(["--verbose", "train.lr_scale=2"]) == VERBOSE
    assert verbosity_from_argv(["--output", "runs/x", "model.preset=mini"]) == 0


def test_ray_data_progress_block_becomes_one_line():
    """Ray Data's non-terminal progress block (as logging_progress.py logs it) → one line of rows done."""
    block = ["======= Running Dataset: dataset_1 =======", "Total Progress: 6/8",
             "Active & requested resources: 1/2 CPU, 6.3MiB/256.0MiB object store", "",
             "ReadFilesParquetV2: 181532/181532", "  Tasks: 0; Actors: 0; Queued blocks: 0 (0.0B)",
             "    - Split Repartition: 181532/1", "MapBatches(score_batch)->Write: 6/8", "=" * 40]
    progress = RayDataProgress()
    passed = []
    for msg in block:
        record = logging.LogRecord("ray.data", logging.INFO, __file__, 1, msg, None, None)
        if progress.filter(record):
            passed.append(record.getMessage())
    assert passed == ["ray data  ReadFilesParquetV2 181532/181532 · MapBatches(score_batch)->Write 6/8"]
    started = ["======= Running Dataset: dataset_2 =======", "ReadFiles: 0/1", "=" * 40]  # nothing done yet: no line
    assert not any(progress.filter(logging.LogRecord("ray.data", logging.INFO, __file__, 1, m, None, None)) for m in started)


def test_the_no_cpu_warning_passes_only_when_no_cpu_comes_back(ray_local):
    from mtcore.console import NoCpuRecheck

    record = logging.LogRecord("ray.data.dataset", logging.WARNING, __file__, 1, "Warning: The Ray cluster currently "
                               "does not have any available CPUs. The Dataset job will hang", None, None)
    assert NoCpuRecheck().filter(record) is False  # this session's Ray has idle CPUs: a false alarm
    other = logging.LogRecord("ray.data.dataset", logging.WARNING, __file__, 1, "something else", None, None)
    assert NoCpuRecheck().filter(other) is True

    import ray

    @ray.remote(num_cpus=1)
    class Holder:
        def ready(self):
            return True

    holders = [Holder.remote() for _ in range(int(ray.cluster_resources()["CPU"]))]
    try:
        ray.get([h.ready.remote() for h in holders])
        assert NoCpuRecheck().filter(record) is True  # every CPU held by an actor: the warning is real
    finally:
        for h in holders:
            ray.kill(h)


def test_progress_lines_follow_quiet(monkeypatch, capsys):
    """A training run's progress lines: printed normally (and where no entry point configured the console,
    as in a benchmark); under -q only the worker warnings, on stderr."""
    from mtcore import console

    for verbosity in (None, console.NORMAL):
        monkeypatch.setattr(console, "_configured", verbosity)
        console.progress_line("step     25  epoch 0  loss 9.070")
        console.progress_line("warning: skipped 3 of 10 training pairs")
        out = capsys.readouterr()
        assert out.out == "step     25  epoch 0  loss 9.070\n" and out.err == "warning: skipped 3 of 10 training pairs\n"
    monkeypatch.setattr(console, "_configured", console.QUIET)
    console.progress_line("step     25  epoch 0  loss 9.070")
    console.progress_line("warning: skipped 3 of 10 training pairs")
    out = capsys.readouterr()
    assert out.out == "" and out.err == "warning: skipped 3 of 10 training pairs\n" and console.quiet()


def test_a_run_whose_workers_do_not_start_says_it_is_waiting(tmp_path):
    """Ray Train waits for free CPUs without end: the driver printed "starting 2 worker(s)" and then nothing."""
    import time

    from mtcore.distributed.progress import follow_progress

    said = []
    with follow_progress(tmp_path / "progress.log", said.append, waiting=lambda: "still waiting", wait_s=0.2):
        time.sleep(2.0)
    assert said.count("still waiting") >= 2
    said.clear()
    (tmp_path / "progress.log").write_text("")  # a resumed run's earlier lines are not repeated
    with follow_progress(tmp_path / "progress.log", said.append, waiting=lambda: "still waiting", wait_s=0.5):
        with (tmp_path / "progress.log").open("a") as fh:
            fh.write("1,000 training pairs read\n")
        time.sleep(1.5)
    assert said == ["1,000 training pairs read"]
