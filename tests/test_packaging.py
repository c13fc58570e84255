"""The package as `pip install .` (not editable) installs it: built as a wheel, used from another directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_carries_its_data_and_its_console_script_cleans_from_elsewhere(tmp_path):
    # From a copy of the package's files, as a fresh clone has them: no build/ or egg-info left by an editable install.
    src = tmp_path / "src"
    for name in ("pyproject.toml", "README.md", *(str(p.relative_to(ROOT)) for p in (ROOT / "mtcore").rglob("*")
                                                  if p.is_file() and "__pycache__" not in p.parts)):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes((ROOT / name).read_bytes())
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("mtcore-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp_path / "site"), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    probe = (
        "import mtcore, pyarrow as pa; from mtcore.cleaning import clean_table, load_config\n"
        "kept, rejects, report = clean_table(pa.table({'src': ['Open the file', 'Open the file', ''], "
        "'tgt': ['Mở tập tin', 'Mở tập tin', 'trống'], 'origin': ['t'] * 3, 'id': ['1', '2', '3']}), load_config())\n"
        "from mtcore.distributed.jobs import DEFAULT_JOB; from mtcore.distributed.tune import DEFAULT_SEARCH\n"
        "assert DEFAULT_JOB.is_file() and DEFAULT_SEARCH.is_file(), 'the default job and search are package data'\n"
        "print(mtcore.__file__); print(report.kept, dict(report.rejected))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    where, counts = out.stdout.splitlines()[-2:]
    assert where.startswith(str(tmp_path / "site"))  # the installed copy, not this checkout
    assert counts == "1 {'duplicate': 1, 'empty': 1}"

    # The console script, as `pip install .` puts it on PATH, run from a directory that is not a checkout.
    mtcore = tmp_path / "site" / "bin" / "mtcore"
    env.pop("RAY_ADDRESS", None)  # its own local Ray, not the test session's
    out = subprocess.run([str(mtcore), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "align-filter" in out.stdout and "backtranslate" in out.stdout, out.stderr[-2000:]
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "c.tsv").write_text("Open the file\tMở tập tin\nOpen the file\tMở tập tin\n", encoding="utf-8")
    out = subprocess.run([str(mtcore), "clean", "--input", "c.tsv", "--output", "out", "--no-mlflow", "--num-cpus", "1"],
                         cwd=tmp_path / "elsewhere", env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    report = json.loads((tmp_path / "elsewhere" / "out" / "report.json").read_text())
    assert (report["input"], report["kept"]) == (2, 1)
    out = subprocess.run([str(mtcore), "clean", "--bogus"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "usage: mtcore clean" in out.stderr  # the command names itself
