"""OpusFilter baseline for the cleaning benchmarks: its venv, its usual filter set, its decisions.

OpusFilter is never a project dependency: it lives in its own venv under
benchmarks/_work/opusvenv (git-ignored), created on first use with
`pip install opusfilter "py3langid<0.4"`. This file is imported by the benchmarks (project venv)
for `ensure_venv`/`FILTERS`, and run *inside* the OpusFilter venv as a script:

    opusvenv/bin/python opusfilter_baseline.py decisions SRC.txt TGT.txt OUT.json
        → for every pair, the first OpusFilter filter that rejects it ("" = kept),
          then exact-duplicate removal (first occurrence kept), as OpusFilter's
          `remove_duplicates` step does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "_work"
VENV = WORK / "opusvenv"
PYTHON = VENV / "bin" / "python"

# OpusFilter's usual filter set with its documented defaults (opusfilter/filters.py, 3.x), en–vi.
FILTERS = [
    {"LengthFilter": {"unit": "word", "min_length": 1, "max_length": 100}},
    {"LengthRatioFilter": {"unit": "word", "threshold": 3}},
    {"LongWordFilter": {"threshold": 40}},
    {"AlphabetRatioFilter": {"threshold": 0.75}},
    {"CharacterScoreFilter": {"scripts": ["Latin", "Latin"], "thresholds": [1, 1]}},
    {"LanguageIDFilter": {"languages": ["en", "vi"], "id_method": "langid", "thresholds": [0, 0]}},
    {"TerminalPunctuationFilter": {"threshold": -2}},
    {"NonZeroNumeralsFilter": {"threshold": 0.5}},
    {"RepetitionFilter": {"threshold": 2, "min_length": 3, "max_length": 100}},
    {"HtmlTagFilter": {}},
]


def ensure_venv() -> Path:
    """The OpusFilter interpreter, installing OpusFilter into its own venv on first use."""
    if not PYTHON.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        # OpusFilter 3.3 calls LanguageIdentifier.from_pickled_model, which py3langid 0.4 removed.
        subprocess.run([str(PYTHON), "-m", "pip", "install", "-q", "opusfilter", "py3langid<0.4"], check=True)
    probe = subprocess.run([str(PYTHON), "-c", "import importlib.metadata as m, opusfilter; print(m.version(\"opusfilter\"))"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise RuntimeError(f"OpusFilter is not importable in {VENV}: {probe.stderr.strip()[-500:]}")
    return PYTHON


def opusfilter_version() -> str:
    out = subprocess.run([str(PYTHON), "-c", "import importlib.metadata as m, opusfilter; print(m.version(\"opusfilter\"))"], capture_output=True, text=True)
    return out.stdout.strip()


def _decisions(src_path: str, tgt_path: str, out_path: str) -> None:
    """Runs inside the OpusFilter venv."""
    from opusfilter.pipeline import FilterPipeline

    src = Path(src_path).read_text(encoding="utf-8").split("\n")[:-1]
    tgt = Path(tgt_path).read_text(encoding="utf-8").split("\n")[:-1]
    pairs = list(zip(src, tgt))
    pipe = FilterPipeline.from_config(FILTERS)
    first = [""] * len(pairs)
    for spec, flt in zip(FILTERS, pipe.filters):
        name = next(iter(spec))
        for i, score in enumerate(flt.score(pairs)):
            if not first[i] and not flt.accept(score):
                first[i] = name
    seen = set()
    for i, pair in enumerate(pairs):  # remove_duplicates: exact pairs, first occurrence kept
        if first[i]:
            continue
        if pair in seen:
            first[i] = "remove_duplicates"
        seen.add(pair)
    Path(out_path).write_text(json.dumps(first), encoding="utf-8")


def write_config(path: Path, src: Path, tgt: Path, n_jobs: int) -> Path:
    """An OpusFilter YAML: `filter` with the usual set (n_jobs processes), then `remove_duplicates`."""
    import yaml

    cfg = {
        "common": {"output_directory": str(path.parent), "default_n_jobs": n_jobs},
        "steps": [
            {
                "type": "filter",
                "parameters": {
                    "inputs": [str(src), str(tgt)],
                    "outputs": ["filtered.en", "filtered.vi"],
                    "filters": FILTERS,
                    "n_jobs": n_jobs,
                },
            },
            {
                "type": "remove_duplicates",
                "parameters": {"inputs": ["filtered.en", "filtered.vi"], "outputs": ["dedup.en", "dedup.vi"]},
            },
        ],
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "decisions":
        _decisions(*sys.argv[2:])
    else:
        sys.exit(__doc__)
