"""How far a dev or test limit's BLEU is from the whole set's: the first N pairs (the old rule) vs N pairs spread
evenly over the set (`mtcore.nmt.metrics.evenly_spaced`, what `train.dev_limit`, `job.test_limit` and
`evaluate --limit` take now).

    python benchmarks/heldout_subset.py --model RUN/best [--sizes 150,400,500,1000]

One checkpoint decodes the whole embedded dev and test sets (greedy) once; each subset is scored from those
hypotheses. The anchor is the whole set's BLEU; the figure is each rule's distance from it, and their ratio.
The held-out sets are stored grouped by catalog, which is why the first rows are not a sample of them.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from mtcore.data import paths
from mtcore.data.corpus import read_corpus
from mtcore.nmt.checkpoint import checkpoint_dir, load_checkpoint
from mtcore.nmt.decoding import translate
from mtcore.nmt.metrics import bleu_tokenize, corpus_bleu, evenly_spaced
from mtcore.nmt.training import oriented_pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a checkpoint directory (or a training run's folder: its best/)")
    ap.add_argument("--sizes", default="150,400,500,1000", help="subset sizes (the limits the project's configs use)")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    ckpt = load_checkpoint(checkpoint_dir(args.model))
    tokenize = bleu_tokenize(ckpt.model_cfg.tgt_lang)
    print(f"model {args.model} ({ckpt.model_cfg.direction}); load {os.getloadavg()[0]:.1f}")
    print("| set | N | whole set | first N | spread N | first − whole | spread − whole | ratio |\n|---|---|---|---|---|---|---|---|")
    for name, path in (("dev", paths.DEV), ("test", paths.TEST)):
        pairs = oriented_pairs(read_corpus(path), ckpt.model_cfg)
        print(f"decoding {name}: {len(pairs):,} pairs, greedy …", file=sys.stderr, flush=True)  # about a minute on 2 cores
        hyps = translate(ckpt.model, ckpt.tokenizer, [s for s, _ in pairs], beam=1)
        refs = [t for _, t in pairs]

        def bleu(rows) -> float:
            return corpus_bleu([hyps[i] for i in rows], [refs[i] for i in rows], tokenize=tokenize).score

        whole = bleu(range(len(pairs)))
        for n in (int(x) for x in args.sizes.split(",")):
            first, spread = bleu(range(min(n, len(pairs)))), bleu(evenly_spaced(len(pairs), n))
            ratio = abs(first - whole) / max(abs(spread - whole), 1e-9)
            print(f"| {name} | {n} | {whole:.2f} | {first:.2f} | {spread:.2f} | {first - whole:+.2f} | "
                  f"{spread - whole:+.2f} | {ratio:.1f}× |", flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
