"""Throughput of the cleaner (Ray Data, 1 vs 2 CPUs) beside OpusFilter (1 vs 2 processes) on the same input.

Inputs: a random sample of the embedded raw corpus (`--opus-pairs`, both tools:
OpusFilter does ~100–200 pairs/s here, so the whole corpus would take it half an
hour per setting), the whole corpus (data/raw/parallel.parquet; before it exists,
this machine's Vietnamese gettext catalogs stand in) and a 1M-pair corpus made by
repeating it with unique ids (ours; OpusFilter there with --opus-1m). Each measurement runs in its own subprocess: ours
is `clean_dataset` on a fresh local Ray started with num_cpus=N (Ray start-up is
reported apart, the pipeline time is what pairs/s is computed from); OpusFilter
is its own CLI (`opusfilter config.yaml`: the usual filter set as `filter` with
n_jobs=N, then `remove_duplicates`) in its own venv, timed end to end.

    python benchmarks/clean_throughput.py [--skip-1m | --only-1m] [--opus-1m]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import opusfilter_baseline as ob  # noqa: E402

from mtcore.data.paths import RAW_PARALLEL  # noqa: E402

OURS = r"""
import json, sys, time
t0 = time.perf_counter()
from mtcore.distributed.cluster import init_ray
init_ray(num_cpus=int(sys.argv[3]))
t1 = time.perf_counter()
from mtcore.cleaning import clean_dataset
r = clean_dataset(sys.argv[1], sys.argv[2], overwrite=True)
t2 = time.perf_counter()
print("RESULT " + json.dumps({"ray_start_s": t1 - t0, "pipeline_s": t2 - t1, "kept": r.report["kept"], "input": r.report["input"]}), flush=True)
"""


def base_corpus(work: Path) -> tuple[Path, str]:
    if RAW_PARALLEL.exists():
        return RAW_PARALLEL, str(RAW_PARALLEL)
    from clean_noise import machine_pairs

    path = work / "machine_catalogs.parquet"
    pq.write_table(pa.Table.from_pandas(machine_pairs(), preserve_index=False), path)
    return path, "this machine's /usr/share/locale/vi catalogs (data/raw/parallel.parquet absent)"


def repeated(path: Path, n: int, out: Path) -> Path:
    t = pq.read_table(path, columns=["src", "tgt", "origin", "id"])
    parts, k = [], 0
    while sum(len(p) for p in parts) < n:
        parts.append(t.set_column(3, "id", pc.binary_join_element_wise(t.column("id"), pa.scalar(f"#{k}"), "")))
        k += 1
    big = pa.concat_tables(parts).slice(0, n)
    pq.write_table(big, out, row_group_size=100_000)
    return out


def run_ours(path: Path, cpus: int, work: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", OURS, str(path), str(work / f"ours-{cpus}"), str(cpus)],
        capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": ""},
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])


def run_opus(path: Path, jobs: int, work: Path) -> dict:
    py = ob.ensure_venv()
    d = work / f"opus-{jobs}"
    d.mkdir(exist_ok=True)
    t = pq.read_table(path, columns=["src", "tgt"])
    flat = lambda s: " ".join((s or "").split())  # noqa: E731 - one pair per line
    (d / "in.en").write_text("".join(flat(s) + "\n" for s in t.column("src").to_pylist()), encoding="utf-8")
    (d / "in.vi").write_text("".join(flat(s) + "\n" for s in t.column("tgt").to_pylist()), encoding="utf-8")
    cfg = ob.write_config(d / "opusfilter.yaml", d / "in.en", d / "in.vi", jobs)
    t0 = time.perf_counter()
    out = subprocess.run([str(py.parent / "opusfilter"), "--overwrite", str(cfg)], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    kept = sum(1 for _ in open(d / "dedup.en", encoding="utf-8"))
    return {"pipeline_s": dt, "kept": kept, "input": len(t)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-1m", action="store_true", help="only the embedded corpus")
    ap.add_argument("--only-1m", action="store_true", help="only the 1M corpus")
    ap.add_argument("--opus-1m", action="store_true", help="also run OpusFilter on the full corpus and the 1M corpus (hours on 2 cores)")
    ap.add_argument("--opus-pairs", type=int, default=30_000, help="size of the sample both tools run on (default %(default)s)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    ob.WORK.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ob.WORK) as tmp:
        work = Path(tmp)
        base, base_name = base_corpus(work)
        sample = work / "sample.parquet"
        t = pq.read_table(base)
        pq.write_table(t.take(sorted(random.Random(0).sample(range(len(t)), min(args.opus_pairs, len(t))))), sample)
        inputs = [] if args.only_1m else [("sample", sample), ("corpus", base)]
        if not args.skip_1m:
            inputs.append(("1M", repeated(base, 1_000_000, work / "big.parquet")))
        print(f"corpus: {base_name}")
        rows = []
        for label, path in inputs:
            n = pq.ParquetFile(path).metadata.num_rows
            ours = {c: run_ours(path, c, work) for c in (1, 2)}
            opus = {j: run_opus(path, j, work) for j in (1, 2)} if (label == "sample" or args.opus_1m) else {}
            rows.append({"input": label, "pairs": n, "ours": ours, "opusfilter": opus})
            for c in (1, 2):
                o = ours[c]
                line = f"{label:>7} {n:>10,} pairs  {c} CPU: ours {n / o['pipeline_s']:>9,.0f} pairs/s ({o['pipeline_s']:.1f}s + Ray start {o['ray_start_s']:.1f}s, kept {o['kept']:,})"
                if c in opus:
                    p = opus[c]
                    line += f" | OpusFilter {n / p['pipeline_s']:>7,.0f} pairs/s ({p['pipeline_s']:.1f}s, kept {p['kept']:,}) | ratio {p['pipeline_s'] / o['pipeline_s']:.1f}x"
                print(line, flush=True)
            print(f"{'':>7} speed-up 1→2 CPUs: ours {ours[1]['pipeline_s'] / ours[2]['pipeline_s']:.2f}x"
                  + (f", OpusFilter {opus[1]['pipeline_s'] / opus[2]['pipeline_s']:.2f}x" if opus else ""))
        if args.json:
            Path(args.json).write_text(json.dumps({"corpus": base_name, "rows": rows}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
