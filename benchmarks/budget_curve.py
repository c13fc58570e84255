"""BLEU against training budget for several model sizes on this machine: the table behind `preset: auto`.

    python benchmarks/budget_curve.py [--sizes tiny,mini,small] [--marks 5,10,20] [--test-limit 1000]

One plain-PyTorch training run per size on the cleaned embedded corpus (the corpus the default
training job uses), with the inverse-square-root schedule, which does not depend on the budget:
the weights at minute M of a longer run are the weights a run with an M-minute budget ends with.
Each run snapshots its weights at every mark and scores each snapshot on the test set (beam 5).
Marks are in minutes of the whole machine (`--threads` cores): with `--clock cpu` (the default) a mark
is reached when the process has used mark × threads CPU-minutes, so that other work on a shared
machine slows the run down without changing what a budget buys; `--clock wall` uses wall time.
Waiting torch threads sleep (OMP_WAIT_POLICY=PASSIVE), so CPU time counts work, not spinning.
The anchor is the old default (`small`): every row prints the best size's BLEU at that budget
beside `small`'s, as a ratio. Results go to --out as JSON and Markdown.
"""

from __future__ import annotations

import argparse
import copy
import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads its OpenMP runtime
import sys
import time
from pathlib import Path

import torch

from mtcore.data import paths
from mtcore.runs import home
from mtcore.config import ModelConfig, TrainConfig
from mtcore.data.corpus import read_corpus
from mtcore.nmt.decoding import translate
from mtcore.distributed.jobs import TrainingJob
from mtcore.nmt.metrics import corpus_bleu, corpus_chrf, spread_over
from mtcore.distributed.ray_training import resolve_train_data, tokenizer_for
from mtcore.nmt.tokenizer import Tokenizer
from mtcore.nmt.training import fit, oriented_pairs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sizes", default="tiny,mini,small", help="model presets, comma-separated")
    p.add_argument("--marks", default="5,10,20", help="budgets in minutes at which weights are scored")
    p.add_argument("--test-limit", type=int, default=1000)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="what a minute of budget is (see above)")
    p.add_argument("--max-tokens", type=int, default=3000, help="tokens per batch (the default job: 2 workers x 1500)")
    p.add_argument("--out", default=str(home() / "budget_curve"))
    p.add_argument("overrides", nargs="*", help="train.KEY=VALUE applied to every size")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = args.sizes.split(",")
    marks = sorted(float(m) for m in args.marks.split(","))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    job = TrainingJob()
    train_data = resolve_train_data(job)
    tok = Tokenizer(tokenizer_for(train_data, job))
    probe = ModelConfig()
    train = oriented_pairs(read_corpus(train_data), probe)
    dev = spread_over(oriented_pairs(read_corpus(paths.DEV), probe), 200)
    test = spread_over(oriented_pairs(read_corpus(paths.TEST), probe), args.test_limit)
    print(f"data   {len(train)} train pairs ({train_data}), {len(test)} test pairs, vocab {tok.vocab_size}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)

    results: list[dict] = []
    for size in sizes:
        model_cfg = ModelConfig.preset(size, pre_norm=True)
        train_cfg = TrainConfig(max_tokens=args.max_tokens, warmup=300, lr_scale=1.0, validate_every=10**9, patience=0,
                                log_every=50, max_epochs=1000, dev_limit=200, time_budget_min=0)
        train_cfg = train_cfg.with_overrides([o.split(".", 1)[1] for o in args.overrides])
        snaps: list[tuple[float, int, dict]] = []
        pending = list(marks)

        cpu0 = time.process_time()

        def on_update(ts, elapsed_s, pending=pending, snaps=snaps, cpu0=cpu0):
            spent_s = (time.process_time() - cpu0) / args.threads if args.clock == "cpu" else elapsed_s
            if pending and spent_s >= pending[0] * 60:
                snaps.append((pending.pop(0), ts.step, copy.deepcopy(ts.model.state_dict())))
                print(f"  {size}: {snaps[-1][0]:g} min ({args.clock}) at step {ts.step}, {elapsed_s / 60:.1f} min wall; "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
            return not pending  # the last mark ends the run

        def on_step(m, size=size):
            print(f"  {size}: step {m['step']:>5}  loss {m['train/loss']:.3f}  {m['train/tokens_per_s']:.0f} tok/s",
                  flush=True)

        print(f"train  {size} ({model_cfg.d_model}d, {model_cfg.layers} layers) for {marks[-1]:g} min", flush=True)
        result = fit(train_cfg, model_cfg, train, dev, tok, on_step=on_step, on_update=on_update)
        if pending:  # the run ended before its last mark (e.g. max_epochs): its final weights stand for it
            snaps.append((pending[0], result.steps, copy.deepcopy(result.model.state_dict())))
        n_params = sum(p.numel() for p in result.model.parameters())
        for mark, step, weights in snaps:
            result.model.load_state_dict(weights)
            t0 = time.perf_counter()
            hyps = translate(result.model, tok, [s for s, _ in test], beam=args.beam, batch_size=32)
            refs = [t for _, t in test]
            bleu, chrf = corpus_bleu(hyps, refs), corpus_chrf(hyps, refs)
            row = {"size": size, "minutes": mark, "steps": step, "params": n_params, "test_bleu": round(bleu.score, 2),
                   "test_chrf": round(chrf.score, 2), "tokens_per_s": round(result.tokens_per_s),
                   "load": round(os.getloadavg()[0], 1), "signature": str(bleu.signature)}
            results.append(row)
            print(f"score  {size} @ {mark:g} min (step {step}): BLEU {bleu.score:.2f} chrF {chrf.score:.2f} "
                  f"({time.perf_counter() - t0:.0f}s to decode)", flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))

    print("\n| minutes | " + " | ".join(sizes) + " | best | best / small |")
    print("|---|" + "---|" * (len(sizes) + 2))
    for mark in marks:
        row = {r["size"]: r for r in results if r["minutes"] == mark}
        best = max(row.values(), key=lambda r: r["test_bleu"])
        anchor = row.get("small", best)["test_bleu"]
        cells = " | ".join(f"{row[s]['test_bleu']:.2f} ({row[s]['steps']} st)" if s in row else "-" for s in sizes)
        print(f"| {mark:g} | {cells} | {best['size']} | {best['test_bleu'] / max(anchor, 1e-9):.2f}x |")
    print(f"\nsignature {results[0]['signature'] if results else '-'}; results in {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
