"""ASHA vs no early stopping (FIFO): the compute a search spends and the best dev BLEU it finds.

    python benchmarks/tune_efficiency.py                      # 8 configurations, tiny model, toy corpus
    python benchmarks/tune_efficiency.py --configs 6 --max-steps 60

The same search space, seed and number of configurations run three times: FIFO (every trial
to the end), ASHA comparing dev BLEU at its rungs (the default) and ASHA comparing dev loss;
the same seed samples the same configurations in all three. Compute is
counted two ways: trial-minutes (the time trials held their workers, start-up included) and
training steps (free of machine noise). Goal (issue 8): ASHA's best dev BLEU within 0.5 of the
exhaustive best, for at most 40 % of its compute.

Data: the templated toy corpus of `mtcore.nmt.training.toy_pairs` (written to a temporary directory), where
a tiny model reaches a usable BLEU within a hundred steps, so configurations really differ
within a run of seconds. Runs in its own temporary MTCORE_HOME and MLflow store.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
from pathlib import Path


def toy_corpus(directory: Path) -> dict[str, str]:
    import pyarrow as pa

    from mtcore.data.corpus import write_parquet
    from mtcore.nmt.training import toy_pairs

    pairs = toy_pairs(360, seed=3)
    out = {}
    for name, rows in (("train", pairs[:300]), ("dev", pairs[300:330]), ("test", pairs[330:])):
        table = pa.table({"src": [s for s, _ in rows], "tgt": [t for _, t in rows], "origin": ["toy"] * len(rows),
                          "id": [f"{name}{i}" for i in range(len(rows))]})
        out[name] = str(write_parquet(table, directory / f"{name}.parquet"))
    return out


def search_config(corpus: dict[str, str], configs: int, max_steps: int, seed: int, workers: int) -> dict:
    every = max(1, max_steps // 9)  # validations; ASHA's one rung (rf 3) at 3·every, a third of the way
    return {
        "job": {"train_data": corpus["train"], "dev_data": corpus["dev"], "test_data": corpus["test"], "vocab_size": 400,
                "test_limit": 10, "test_beam": 1, "max_failures": 0},
        "model": {"preset": "tiny"},
        "train": {"max_tokens": 400, "max_len": 32, "warmup": 50, "validate_every": every, "log_every": every,
                  "dev_limit": 30, "max_steps": every * 9, "patience": 0},
        "search": {
            "num_samples": configs, "seed": seed, "workers_per_trial": workers, "register_as": "-",
            # Dev BLEU of a tiny model is 0 for everyone in the first few validations (ties continue):
            # the first cut comes once BLEU tells configurations apart.
            "asha": {"grace_period": every * 3, "reduction_factor": 3},
            "space": {
                "model.heads": {"choice": [2, 4, 8]},
                "train.warmup": {"randint": [10, 200]},
                "train.label_smoothing": {"uniform": [0.0, 0.3]},
                "train.lr_scale": {"loguniform": [0.2, 5.0]},
            },
        },
    }


def compare(results: dict, goal_share: float) -> None:
    """Print searches side by side against the first (FIFO, the exhaustive one): compute and best dev BLEU,
    and whether each reaches within 0.5 BLEU of its best for at most `goal_share` of its trial-minutes."""
    fifo_key = next(iter(results))
    fifo = results[fifo_key]
    others = list(results)[1:]
    steps = {k: sum(r.steps for r in v.rows) for k, v in results.items()}
    best = {k: v.best.best_dev_bleu if v.best else float("nan") for k, v in results.items()}
    print(f"{'':22}" + "".join(f"{k:>12}" for k in results) + "".join(f"{k + '/' + fifo_key:>16}" for k in others))

    def line(name, cell, ratio=None):
        cells = "".join(f"{cell(k):>12}" for k in results)
        ratios = "".join(f"{ratio(k):>16}" for k in others) if ratio else ""
        print(f"{name:22}{cells}{ratios}")

    line("configurations", lambda k: str(len(results[k].rows)),
         lambda k: "same" if [r.values for r in results[k].rows] == [r.values for r in fifo.rows] else "DIFFERENT")
    line("trials stopped early", lambda k: str(sum(r.stopped_early for r in results[k].rows)))
    line("trial-minutes", lambda k: f"{results[k].trial_minutes:.2f}", lambda k: f"{results[k].trial_minutes / fifo.trial_minutes:.0%}")
    line("training steps", lambda k: str(steps[k]), lambda k: f"{steps[k] / steps[fifo_key]:.0%}")
    line("wall minutes", lambda k: f"{results[k].elapsed_s / 60:.2f}", lambda k: f"{results[k].elapsed_s / fifo.elapsed_s:.0%}")
    line("best dev BLEU", lambda k: f"{best[k]:.2f}", lambda k: f"{best[k] - best[fifo_key]:+.2f}")
    for k in others:
        ok_bleu = best[k] >= best[fifo_key] - 0.5
        ok_compute = results[k].trial_minutes <= goal_share * fifo.trial_minutes
        print(f"goal, {k}: within 0.5 BLEU of the exhaustive best: {'yes' if ok_bleu else 'no'}; "
              f"<= {goal_share:.0%} of its trial-minutes: {'yes' if ok_compute else 'no'} "
              f"(of its steps: {'yes' if steps[k] <= goal_share * steps[fifo_key] else 'no'})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", type=int, default=8, help="configurations sampled (default: %(default)s)")
    ap.add_argument("--max-steps", type=int, default=90, help="steps of a trial that is never stopped (default: %(default)s)")
    ap.add_argument("--workers-per-trial", type=int, default=0, help="0 = the default plan (2 CPU workers, 1 trial at a time)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="tune_efficiency-"))
    os.environ["MTCORE_HOME"] = str(work / "runs")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"
    import torch

    torch.set_num_threads(1)
    from mtcore.distributed.cluster import init_ray
    from mtcore.distributed.tune import TuneJob, format_table, run_search

    init_ray()
    d = search_config(toy_corpus(work), args.configs, args.max_steps, args.seed, args.workers_per_trial)
    # FIFO (exhaustive), then ASHA with its rungs on dev BLEU (the default) and on dev loss.
    variants = {"FIFO": ("fifo", "dev/bleu"), "ASHA bleu": ("asha", "dev/bleu"), "ASHA loss": ("asha", "dev/loss")}
    results = {}
    for label, (scheduler, metric) in variants.items():
        search = {**d["search"], "scheduler": scheduler, "asha": {**d["search"]["asha"], "metric": metric}}
        tj = TuneJob.from_dict({**d, "search": search}, f"<{label}>")
        out = run_search(tj, overwrite=True)  # verbose=1: a line per trial start, validation and end
        print(f"\n== {label}: {out.name}\n{format_table(out.rows, tj.search.space)}\n", flush=True)
        results[label] = out

    compare(results, goal_share=0.4)
    fifo = results["FIFO"]
    print(f"machine: {platform.node()} {os.cpu_count()} CPUs, {fifo.plan.describe()}; "
          f"{datetime.date.today().isoformat()}; python {platform.python_version()}")
    print(f"work dir: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
