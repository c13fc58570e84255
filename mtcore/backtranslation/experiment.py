"""Does back-translation help here? A simulated low-resource experiment on the embedded data.

The comparison the literature makes (Edunov et al. 2018, Caswell et al. 2019), at CPU scale:
- a share of the cleaned, aligned real pairs stays parallel; the Vietnamese side of the rest
  becomes monolingual text (disjoint by construction);
- one vi→en model is trained on the parallel share (a step budget; its best checkpoint by dev BLEU;
  its BLEU is reported: a weak reverse model is the usual reason BT fails) and back-translates
  ratio × |real| of that text in each mode;
- English→Vietnamese models are trained *to convergence*, not to a budget: the same step cap,
  validation interval and patience for every variant, early stopping and the checkpoint chosen on
  dev loss (on 300 greedy dev sentences, BLEU swung by up to 6 points between validations and
  picked checkpoints at random; dev loss over every dev pair moves smoothly), so that
  adding synthetic data cannot look worse only because real pairs were seen less often
  (real pairs are also upsampled at ratios above 1);
- every variant is trained with several seeds; the table gives the mean and the spread.

Each finished (variant, seed) is appended to OUTPUT/results.jsonl with what it was made from (the
settings, the input's contents, the training and decoding code, the variant and its training data's
contents), so an interrupted experiment resumes where it stopped and a changed one starts afresh.
The en→vi runs land in the MLflow experiment `bt_effect`; the reverse model and the back-translation jobs in
`backtranslate`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from mtcore.backtranslation.config import BTConfig, settings_hash
from mtcore.backtranslation.pipeline import run_backtranslation
from mtcore.config import AUTO_CPU_TRAIN, BEST_METRICS, PRESETS
from mtcore.data.corpus import read_corpus, write_parquet
from mtcore.distributed.jobs import TrainingJob
from mtcore.data.paths import DEV, TEST
from mtcore.runs import code_version, content_hash, home

log = logging.getLogger(__name__)

EXPERIMENT = "bt_effect"
REAL_ONLY = "real"


@dataclass(frozen=True)
class Variant:
    mode: str | None  # None: real pairs only
    tag: bool = False  # <bt> before synthetic sources (Caswell et al. 2019)
    ratio: float = 1.0  # synthetic : real
    upsample: int = 1  # copies of each real pair, so that a higher ratio does not show real pairs less often


VARIANTS: dict[str, Variant] = {
    REAL_ONLY: Variant(None),
    "beam": Variant("beam"),
    "beam_tagged": Variant("beam", tag=True),
    "sample": Variant("sample"),  # top-k 10, untagged: Edunov et al.'s best at scale
    "noised": Variant("noised"),  # beam output with word drops, blanks and local swaps
    "beam_tagged_2to1": Variant("beam", tag=True, ratio=2.0, upsample=2),
    "sample_2to1": Variant("sample", ratio=2.0, upsample=2),
    "noised_2to1": Variant("noised", ratio=2.0, upsample=2),  # the mode that tied real only at 1:1, with more synthetic text
}
# The order in which a run that may be cut short spends its time: the comparison first.
DEFAULT_VARIANTS = (REAL_ONLY, "beam_tagged", "sample", "noised", "beam", "beam_tagged_2to1", "sample_2to1")


@dataclass(frozen=True)
class EffectConfig:
    parallel_share: float = 0.1
    steps: int = 3000  # cap per en→vi model; early stopping ends it first (at 1,500, BT models still met the cap)
    validate_every: int = 150
    patience: int = 4  # validations without a gain in `best_metric` before a model is considered converged
    best_metric: str = "loss"  # train.best_metric of every en→vi model: "loss" or "bleu"
    dev_limit: int = 300
    warmup: int = AUTO_CPU_TRAIN["warmup"]
    preset: str = "mini"
    seeds: tuple[int, ...] = (0, 1)  # forward-model seeds; the split and the reverse model use seed 0
    reverse_steps: int = 1500
    reverse_preset: str = "mini"
    max_mono: int = 0  # cap on sentences back-translated per mode (0: ratio × real pairs decides)
    output: str = ""  # "": HOME/bt_effect, HOME read when the config is made (--home), not at import
    test_limit: int = 1000
    overwrite: bool = False  # redo the back-translation stages (after a code change they refuse to be reused)
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    vocab: int = 8000  # forward and reverse SentencePiece vocabularies
    encoder: str = "builtin"  # sentence encoder of the alignment and synthetic filters
    dev_data: str = str(DEV)
    test_data: str = str(TEST)

    def __post_init__(self):
        if not self.output:
            object.__setattr__(self, "output", str(home() / "bt_effect"))
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown or not self.variants:
            raise ValueError(f"variants must be a non-empty subset of {list(VARIANTS)}, not {list(self.variants)}")
        if REAL_ONLY not in self.variants:
            raise ValueError(f"variants must include {REAL_ONLY!r}: every gain is measured against it")
        if not 0 < self.parallel_share < 1:
            raise ValueError(f"parallel_share ({self.parallel_share}) must lie in (0, 1)")
        if not self.seeds:
            raise ValueError("at least one seed is needed")
        for name in ("seeds", "variants"):
            if len(set(getattr(self, name))) != len(getattr(self, name)):
                raise ValueError(f"{name} {list(getattr(self, name))} repeat an entry")
        for name in ("steps", "validate_every", "reverse_steps", "warmup"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} ({getattr(self, name)}) must be positive")
        for name in ("patience", "dev_limit", "test_limit", "max_mono"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} ({getattr(self, name)}) must be >= 0")
        if self.best_metric not in BEST_METRICS:
            raise ValueError(f"best_metric must be one of {sorted(BEST_METRICS)}, not {self.best_metric!r}")
        for name in (self.preset, self.reverse_preset):
            if name not in PRESETS:
                raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")

    def fingerprint(self, aligned_path: str) -> str:
        """What every finished row depends on: the settings (not which variants or seeds this invocation
        runs), the input's contents and the code that trains and decodes."""
        d = dataclasses.asdict(self)
        for key in ("variants", "seeds", "output", "overwrite"):
            d.pop(key)
        for key in ("dev_data", "test_data"):  # by contents: an edited test set is another result, a moved checkout is not
            d[key] = content_hash(d[key]) if Path(d[key]).exists() else d[key]
        return settings_hash({"settings": d, "aligned": content_hash(aligned_path),
                              "code": code_version("mtcore.nmt", "mtcore.distributed", "mtcore.backtranslation", "mtcore.config")})


def split_low_resource(aligned: pa.Table, share: float, seed: int) -> tuple[pa.Table, pa.Table]:
    """(parallel share, monolingual Vietnamese of the rest): disjoint by construction."""
    order = np.random.default_rng(seed).permutation(len(aligned))
    cut = int(share * len(aligned))
    parallel = aligned.take(pa.array(np.sort(order[:cut])))
    rest = aligned.take(pa.array(np.sort(order[cut:])))
    mono = pa.table({"text": rest["tgt"], "origin": rest["origin"], "id": rest["id"]})
    return parallel, mono


def forward_job(cfg: EffectConfig, name: str, seed: int, train_data: str, key: str) -> TrainingJob:
    """Every variant's en→vi model: the default job's CPU settings, early stopping on `best_metric`. `key`
    (the experiment's fingerprint) names the run, so that other settings are another run."""
    train = {**AUTO_CPU_TRAIN, "max_steps": cfg.steps, "warmup": cfg.warmup, "validate_every": cfg.validate_every,
             "patience": cfg.patience, "best_metric": cfg.best_metric, "dev_limit": cfg.dev_limit, "max_epochs": 1000,
             "seed": seed}
    if cfg.preset == "tiny":  # tests: seconds, not minutes
        train |= {"max_tokens": 512, "max_len": 64, "log_every": 5, "average_every": 2}
    return TrainingJob.from_dict({
        "job": {"train_data": train_data, "experiment": EXPERIMENT, "run_name": f"bt-effect-{name}-s{seed}-{cfg.preset}-{key[:8]}",
                "test_limit": cfg.test_limit, "test_beam": 4, "log_model": False, "vocab_size": cfg.vocab,
                "dev_data": cfg.dev_data, "test_data": cfg.test_data},
        "model": {"preset": cfg.preset, "pre_norm": True},
        "train": train,
    })


def read_results(path: Path, fingerprint: str) -> dict[tuple[str, int], dict]:
    """Rows finished earlier with this fingerprint, by (variant, seed); a line cut by a kill is skipped."""
    if not path.exists():
        return {}
    rows, other = {}, 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            log.warning("%s:%d: not a complete JSON row (cut by an interruption?); skipped", path, number)
            continue
        if row is None:
            continue
        if row.get("fingerprint") == fingerprint:
            rows[(row["variant"], row["seed"])] = row
        else:
            other += 1
    if other:
        log.warning("%s: %d earlier rows were made with other settings, input or code; not reused", path, other)
    return rows


def append_row(path: Path, row: dict) -> None:
    """One JSON line; a line left unfinished by an interruption is ended first, not glued to this one."""
    with path.open("a+b") as f:  # appends go to the end whatever the position; reading the last byte needs one
        cut = f.seek(0, os.SEEK_END) > 0 and f.seek(-1, os.SEEK_END) >= 0 and f.read(1) != b"\n"
        f.write((("\n" if cut else "") + json.dumps(row) + "\n").encode("utf-8"))


def synthetic_rejects(bt) -> dict[str, float]:
    """Share of the back-translations each synthetic-filter rule removed."""
    report = next(s for s in bt.stages if s["stage"] == "synthetic_filter")
    total = max(1, report["input"])
    return {reason: round(n / total, 4) for reason, n in sorted(report["rejected"].items(), key=lambda kv: -kv[1])}


def run_effect(cfg: EffectConfig, aligned_path: str, echo=print) -> dict:
    """Run (or resume) the experiment; returns {"reverse": …, "synthetic": {mode: …}, "rows": [...], "summary": [...]}."""
    from mtcore.distributed.ray_training import run_training

    root = Path(cfg.output)
    root.mkdir(parents=True, exist_ok=True)
    fingerprint = cfg.fingerprint(aligned_path)
    results_path = root / "results.jsonl"
    done = read_results(results_path, fingerprint)
    parallel, mono = split_low_resource(read_corpus(aligned_path), cfg.parallel_share, seed=0)
    parallel_path = write_parquet(parallel, root / "parallel.parquet")
    mono_path = write_parquet(mono, root / "mono.parquet")
    base = BTConfig(corpus=str(parallel_path), mono=str(mono_path), reverse_steps=cfg.reverse_steps, max_mono=cfg.max_mono,
                    reverse_preset=cfg.reverse_preset, reverse_vocab=cfg.vocab, encoder=cfg.encoder, seed=0,
                    overwrite=cfg.overwrite)
    # The first BT run trains the reverse model (and cleans and aligns the parallel share: real-only's data)
    # and is variant "beam"; the other variants reuse its reverse model.
    first = run_backtranslation(dataclasses.replace(base, output=str(root / "bt-reverse"), mode="beam", tag=False))
    reverse = next(s for s in first.stages if s["stage"] == "reverse_model")
    echo(f"reverse model (vi→en, {cfg.reverse_preset}): {reverse['steps']} steps, dev BLEU {reverse['dev_bleu']:.2f}, "
         f"test BLEU {reverse['test_bleu']:.2f}")
    real_data = str(root / "bt-reverse" / "02_align_filter" / "kept")
    synthetic: dict[str, dict] = {}
    for name in cfg.variants:
        v = VARIANTS[name]
        if v.mode is None:
            data, n_synthetic = real_data, 0
        else:
            out = root / f"bt-{v.mode}{'-tagged' if v.tag else ''}-r{v.ratio:g}-u{v.upsample}"
            bt = first if v == VARIANTS["beam"] else run_backtranslation(dataclasses.replace(
                base, output=str(out), mode=v.mode, tag=v.tag, ratio=v.ratio, upsample=v.upsample, reuse_from=str(first.output)))
            data, n_synthetic = str(bt.augmented), bt.stages[-1]["synthetic_rows"]
            synthetic[name] = {"synthetic_pairs": n_synthetic, "rejected_share": synthetic_rejects(bt)}
        made_from = {"variant": dataclasses.asdict(v), "data": content_hash(data)}
        for seed in cfg.seeds:
            if (name, seed) in done and done[(name, seed)].get("made_from") == made_from:
                echo(f"{name} seed {seed}: done earlier, test BLEU {done[(name, seed)]['test_bleu']:.2f}")
                continue
            outcome = run_training(forward_job(cfg, name, seed, data, fingerprint))
            row = {"variant": name, "seed": seed, "synthetic_pairs": n_synthetic, "steps": outcome.steps,
                   "dev_bleu": outcome.best_dev_bleu, "test_bleu": outcome.test["test/bleu"], "test_chrf": outcome.test["test/chrf"],
                   "signature": outcome.test["test/bleu_signature"], "mlflow_run_id": outcome.mlflow_run_id,
                   "minutes": round(outcome.elapsed_s / 60, 2), "fingerprint": fingerprint, "made_from": made_from}
            append_row(results_path, row)
            done[(name, seed)] = row
            echo(f"{name} seed {seed}: {outcome.steps} steps, dev BLEU {row['dev_bleu']:.2f}, test BLEU {row['test_bleu']:.2f}")
    rows = [done[(n, s)] for n in cfg.variants for s in cfg.seeds]
    return {"reverse": reverse, "synthetic": synthetic, "rows": rows, "summary": summarize(rows)}


def summarize(rows: list[dict]) -> list[dict]:
    """Per variant: mean and spread (half the range) over seeds, and the gain over real-only's mean."""
    by_variant: dict[str, list[dict]] = {}
    for r in rows:
        by_variant.setdefault(r["variant"], []).append(r)
    real = np.mean([r["test_bleu"] for r in by_variant[REAL_ONLY]]) if REAL_ONLY in by_variant else float("nan")
    out = []
    for name, rs in by_variant.items():
        bleu = np.array([r["test_bleu"] for r in rs])
        out.append({"variant": name, "seeds": len(rs), "synthetic_pairs": rs[0]["synthetic_pairs"],
                    "steps": float(np.mean([r["steps"] for r in rs])), "dev_bleu": float(np.mean([r["dev_bleu"] for r in rs])),
                    "test_bleu": float(bleu.mean()), "spread": float((bleu.max() - bleu.min()) / 2),
                    "test_chrf": float(np.mean([r["test_chrf"] for r in rs])), "gain": float(bleu.mean() - real)})
    return out
