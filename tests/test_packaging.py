"""The package as `pip install .` (not editable) installs it: built as a wheel, used from another directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_carries_the_rules_and_cleans_from_elsewhere(tmp_path):
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
        "print(mtcore.__file__); print(report.kept, dict(report.rejected))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    where, counts = out.stdout.splitlines()[-2:]
    assert where.startswith(str(tmp_path / "site"))  # the installed copy, not this checkout
    assert counts == "1 {'duplicate': 1, 'empty': 1}"
