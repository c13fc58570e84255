"""Back-translation throughput per mode: the Ray Data actor pool against a plain loop.

    python benchmarks/bt_throughput.py [--model DIR] [--sentences 2000] [--modes beam,sample,noised]

The model is the reverse (vi→en) checkpoint of the main job (`python pipelines/backtranslate.py`
makes it). Both sides translate the same monolingual sentences with the same batch size:
- pool:  `mtcore.backtranslation.translate.back_translate_table`, length-sorted batches on a
         Ray Data actor pool (one actor per CPU, one model load per actor);
- plain: one process, the same decoding, batches cut in corpus order (what a script that
         loops over the file does).
Ray's start-up is paid before timing; the pool's actor start-up (model loads) is inside it.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import pyarrow as pa
import torch

from mtcore.backtranslation.config import BTConfig
from mtcore.backtranslation.pipeline import read_mono
from mtcore.backtranslation.translate import BATCH_SIZE, back_translate_table, translate_texts
from mtcore.nmt.checkpoint import load_checkpoint
from mtcore.distributed.cluster import available_cpus, init_ray
from mtcore.data.paths import MONO_VI
from mtcore.runs import home

DEFAULT_MODEL = home() / "backtranslate" / "03_reverse_model" / "checkpoint"


def plain_loop(model_dir: str, texts: list[str], cfg: BTConfig) -> float:
    torch.set_num_threads(1)  # as each actor: one core
    ckpt = load_checkpoint(model_dir)
    t0 = time.perf_counter()
    for i in range(0, len(texts), BATCH_SIZE):
        translate_texts(ckpt, texts[i:i + BATCH_SIZE], cfg.mode, cfg.decode(), cfg.seed)
    return len(texts) / (time.perf_counter() - t0)


def pool(model_dir: str, mono: pa.Table, cfg: BTConfig) -> float:
    t0 = time.perf_counter()
    out = back_translate_table(mono, model_dir, cfg)
    assert len(out) == len(mono)
    return len(mono) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--modes", default="beam,sample,noised")
    args = ap.parse_args()
    if not Path(args.model).is_dir():
        raise SystemExit(f"--model {args.model}: no checkpoint there; run `python pipelines/backtranslate.py` first or pass --model")
    mono = read_mono(str(MONO_VI))
    # A seeded sample across the whole file, so both sides see the same mix of short and long sentences.
    mono = mono.take(pa.array(sorted(torch.randperm(len(mono), generator=torch.Generator().manual_seed(0))[: args.sentences].tolist())))
    texts = mono.column("text").to_pylist()
    init_ray()
    print(f"\nBack-translation throughput, {len(texts)} sentences, {available_cpus()} CPUs for the pool, "
          f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), model {args.model}")
    print(f"{'mode':<8}{'pool sent/s':>13}{'plain sent/s':>14}{'ratio':>8}")
    for mode in args.modes.split(","):
        cfg = BTConfig(mode=mode)
        pooled = pool(args.model, mono, cfg)
        plain = plain_loop(args.model, texts, cfg)
        print(f"{mode:<8}{pooled:>13.1f}{plain:>14.1f}{pooled / plain:>7.2f}x")


if __name__ == "__main__":
    main()
