"""Does back-translation help here? A simulated low-resource experiment on the embedded data.

A share of the cleaned, aligned real pairs stays parallel; the Vietnamese side of
the rest becomes monolingual text. One vi→en model is trained on the parallel
share and back-translates that text; then English→Vietnamese models are trained
with the same budget on
  (a) real only, (b) real + beam BT, (c) real + noised-beam BT, (d) real + tagged beam BT,
and scored on the test set. Every run lands in the MLflow experiment `bt_effect`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from mtcore.backtranslation.config import BTConfig
from mtcore.backtranslation.pipeline import run_backtranslation
from mtcore.data.corpus import read_corpus, write_parquet
from mtcore.distributed.jobs import TrainingJob
from mtcore.data.paths import DEV, TEST
from mtcore.runs import home

EXPERIMENT = "bt_effect"
VARIANTS = {  # name: (mode, tag) or None for real-only
    "a_real_only": None,
    "b_beam": ("beam", False),
    "c_noised": ("noised", False),
    "d_beam_tagged": ("beam", True),
}


@dataclass(frozen=True)
class EffectConfig:
    parallel_share: float = 0.2
    minutes: float = 5.0  # training budget of every forward model, when `steps` is 0
    steps: int = 0  # a step budget instead: equal work per variant even when the machine's load varies
    warmup: int = 1000
    reverse_minutes: float = 5.0
    max_mono: int = 6000
    preset: str = "small"
    output: str = str(home() / "bt_effect")
    seed: int = 0
    test_limit: int = 1000
    variants: tuple[str, ...] = tuple(VARIANTS)
    reverse_preset: str = "mini"
    vocab: int = 8000  # forward and reverse SentencePiece vocabularies
    encoder: str = "builtin"  # sentence encoder of the alignment and synthetic filters
    dev_data: str = str(DEV)
    test_data: str = str(TEST)

    def __post_init__(self):
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown or not self.variants:
            raise ValueError(f"variants must be a non-empty subset of {list(VARIANTS)}, not {list(self.variants)}")
        if not 0 < self.parallel_share < 1:
            raise ValueError(f"parallel_share ({self.parallel_share}) must lie in (0, 1)")


def split_low_resource(aligned: pa.Table, share: float, seed: int) -> tuple[pa.Table, pa.Table]:
    """(parallel share, monolingual Vietnamese of the rest): disjoint by construction."""
    order = np.random.default_rng(seed).permutation(len(aligned))
    cut = int(share * len(aligned))
    parallel = aligned.take(pa.array(np.sort(order[:cut])))
    rest = aligned.take(pa.array(np.sort(order[cut:])))
    mono = pa.table({"text": rest["tgt"], "origin": rest["origin"], "id": rest["id"]})
    return parallel, mono


def forward_job(cfg: EffectConfig, name: str, train_data: str) -> TrainingJob:
    budget = {"max_steps": cfg.steps} if cfg.steps else {"time_budget_min": cfg.minutes}
    label = f"{cfg.steps}steps" if cfg.steps else f"{cfg.minutes:g}min"
    return TrainingJob.from_dict({
        "job": {"train_data": train_data, "experiment": EXPERIMENT, "run_name": f"bt-effect-{name}-{cfg.preset}-{label}",
                "test_limit": cfg.test_limit, "test_beam": 4, "log_model": False, "vocab_size": cfg.vocab,
                "dev_data": cfg.dev_data, "test_data": cfg.test_data},
        "model": {"preset": cfg.preset, "pre_norm": True},
        "train": {**budget, "warmup": cfg.warmup, "lr_scale": 2.0, "max_tokens": 3000,
                  "validate_every": 500, "dev_limit": 300, "patience": 0, "max_epochs": 100, "seed": cfg.seed},
    })


def run_effect(cfg: EffectConfig, aligned_path: str) -> list[dict]:
    from mtcore.distributed.ray_training import run_training

    root = Path(cfg.output)
    parallel, mono = split_low_resource(read_corpus(aligned_path), cfg.parallel_share, cfg.seed)
    parallel_path = write_parquet(parallel, root / "parallel.parquet")
    mono_path = write_parquet(mono, root / "mono.parquet")
    base = BTConfig(corpus=str(parallel_path), mono=str(mono_path), reverse_minutes=cfg.reverse_minutes,
                    max_mono=cfg.max_mono, ratio=1.0, seed=cfg.seed, reverse_preset=cfg.reverse_preset,
                    reverse_vocab=cfg.vocab, encoder=cfg.encoder)
    # The beam run trains the reverse model; its aligned real pairs are variant (a)'s data.
    first = run_backtranslation(dataclasses.replace(base, output=str(root / "bt-beam"), mode="beam", tag=False))
    rows = []
    for name in cfg.variants:
        variant = VARIANTS[name]
        if variant is None:
            train_data, synthetic = str(root / "bt-beam" / "02_align_filter" / "kept"), 0
        elif variant == ("beam", False):
            train_data, synthetic = str(first.augmented), first.stages[-1]["synthetic_rows"]
        else:
            mode, tag = variant
            out = root / f"bt-{mode}{'-tagged' if tag else ''}"
            bt = run_backtranslation(dataclasses.replace(base, output=str(out), mode=mode, tag=tag, reverse_model=first.reverse_model))
            train_data, synthetic = str(bt.augmented), bt.stages[-1]["synthetic_rows"]
        outcome = run_training(forward_job(cfg, name, train_data))
        rows.append({"variant": name, "synthetic_pairs": synthetic, "steps": outcome.steps,
                     "dev_bleu": outcome.best_dev_bleu, "test_bleu": outcome.test["test/bleu"],
                     "test_chrf": outcome.test["test/chrf"], "signature": outcome.test["test/bleu_signature"],
                     "mlflow_run_id": outcome.mlflow_run_id})
    return rows
