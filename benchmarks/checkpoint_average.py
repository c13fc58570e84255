"""Checkpoint averaging on this machine: how many snapshots, how far apart, and what it buys.

    python benchmarks/checkpoint_average.py [--minutes 11] [--test-limit 1000]

One plain-PyTorch run of the default job's model and schedule (`preset: auto` for the budget: its model
and its train settings, 2 workers' batch in one process) on the cleaned embedded corpus, for `--minutes`
of the whole machine (CPU-time clock, as benchmarks/budget_curve.py). It keeps the last 16 weight
snapshots 25 steps apart; afterwards every (snapshots, spacing) average that fits in them, and the last
weights (the anchor), are scored on dev (greedy, the pairs `fit` validates on) and test (beam 5).
The table shows test BLEU and each average's gain over the last weights; the train.average_last /
average_every defaults of `preset: auto` are the winner on dev.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads its OpenMP runtime
import sys
import time
from pathlib import Path

import torch

from mtcore.config import ModelConfig, TrainConfig, auto_settings
from mtcore.data import paths
from mtcore.runs import home
from mtcore.data.corpus import read_corpus
from mtcore.distributed.jobs import TrainingJob
from mtcore.distributed.ray_training import resolve_train_data, tokenizer_for
from mtcore.nmt.averaging import WeightSnapshots, mean_state
from mtcore.nmt.decoding import translate
from mtcore.nmt.metrics import corpus_bleu, spread_over
from mtcore.nmt.tokenizer import Tokenizer
from mtcore.nmt.training import fit, oriented_pairs

GRID_STEP, GRID_KEEP = 25, 16
VARIANTS = [(n, s) for s in (25, 50, 100) for n in (2, 4, 8, 16) if (n - 1) * s // GRID_STEP < GRID_KEEP]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--minutes", type=float, default=11.0, help="training budget (the default job's)")
    p.add_argument("--test-limit", type=int, default=1000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(home() / "checkpoint_average"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    model_keys, train_keys, why = auto_settings(args.minutes, gpus=0)
    model_cfg = ModelConfig(**model_keys)
    train_cfg = TrainConfig(**{**train_keys, "max_tokens": 2 * train_keys["max_tokens"], "validate_every": 10**9,
                               "patience": 0, "time_budget_min": 0})
    job = TrainingJob()
    train_data = resolve_train_data(job)
    tok = Tokenizer(tokenizer_for(train_data, job))
    train = oriented_pairs(read_corpus(train_data), model_cfg)
    dev = spread_over(oriented_pairs(read_corpus(paths.DEV), model_cfg), train_cfg.dev_limit)
    test = spread_over(oriented_pairs(read_corpus(paths.TEST), model_cfg), args.test_limit)
    print(f"{why}\ndata   {len(train)} train pairs, {len(dev)} dev, {len(test)} test; load {os.getloadavg()[0]:.1f}",
          flush=True)

    snaps = WeightSnapshots(GRID_KEEP, GRID_STEP)
    cpu0 = time.process_time()

    def on_update(ts, _elapsed):
        snaps.maybe_take(ts.model, ts.step)
        return (time.process_time() - cpu0) / args.threads >= args.minutes * 60

    def on_step(m):
        print(f"  step {m['step']:>5}  loss {m['train/loss']:.3f}  {m['train/tokens_per_s']:.0f} tok/s  "
              f"{(time.process_time() - cpu0) / args.threads / 60:.1f}/{args.minutes:g} min; load {os.getloadavg()[0]:.1f}",
              flush=True)

    result = fit(train_cfg, model_cfg, train, dev, tok, on_step=on_step, on_update=on_update)
    model = result.model
    last = {k: v.detach().clone() for k, v in model.state_dict().items()}
    snaps.maybe_take(model, result.steps, force=True)
    grid = dict(snaps.items)  # step -> weights

    def score(weights, label) -> dict:
        model.load_state_dict(weights)
        t0 = time.perf_counter()
        dev_bleu = corpus_bleu(translate(model, tok, [s for s, _ in dev], beam=1, batch_size=64), [t for _, t in dev])
        test_bleu = corpus_bleu(translate(model, tok, [s for s, _ in test], beam=5, batch_size=32), [t for _, t in test])
        row = {"variant": label, "dev_bleu": round(dev_bleu.score, 2), "test_bleu": round(test_bleu.score, 2),
               "signature": str(test_bleu.signature), "load": round(os.getloadavg()[0], 1)}
        print(f"score  {label:<28} dev {row['dev_bleu']:6.2f}  test {row['test_bleu']:6.2f}  "
              f"({time.perf_counter() - t0:.0f}s; load {row['load']})", flush=True)
        return row

    rows = [score(last, f"last (step {result.steps})")]
    for n, spacing in VARIANTS:
        # What fit keeps with average_last=n, average_every=spacing: the last multiples of spacing, and the final step.
        steps = sorted(set(range(spacing, result.steps + 1, spacing)) | {result.steps})[-n:]
        if any(s not in grid for s in steps):
            continue
        rows.append(score(mean_state(grid[s] for s in steps), f"average of {n}, {spacing} steps apart"))
        rows[-1].update(n=n, spacing=spacing)
    anchor = rows[0]["test_bleu"]
    best = max(rows[1:], key=lambda r: r["dev_bleu"])
    (out / "results.json").write_text(json.dumps({"steps": result.steps, "minutes": args.minutes, "rows": rows}, indent=1))
    print("\n| weights | dev BLEU (greedy) | test BLEU (beam 5) | test / last |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['variant']} | {r['dev_bleu']:.2f} | {r['test_bleu']:.2f} | {r['test_bleu'] / max(anchor, 1e-9):.3f}x |")
    print(f"\nbest on dev: {best['variant']}: test {best['test_bleu']:.2f} vs last {anchor:.2f} "
          f"({best['test_bleu'] - anchor:+.2f}); {result.steps} steps; signature {rows[0]['signature']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
