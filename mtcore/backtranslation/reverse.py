"""The reverse (vi→en) model's training job: its own module, so that the back-translation stages that depend on
its settings (`BTConfig.stage_settings`) see a change to them and nothing else."""

from __future__ import annotations

from pathlib import Path

EXPERIMENT = "backtranslate"


def reverse_job(cfg, aligned: Path, run_name: str):
    """A pre-norm model of `cfg.reverse_preset` on the aligned pairs, on a step or a clock budget. `cfg`: the
    `BTConfig` (not imported: its checks build this job, so config imports this module)."""
    from mtcore.distributed.jobs import TrainingJob

    budget = {"max_steps": cfg.reverse_steps} if cfg.reverse_steps else {"time_budget_min": cfg.reverse_minutes}
    job = TrainingJob.from_dict(
        {
            "job": {"train_data": str(aligned), "experiment": EXPERIMENT, "vocab_size": cfg.reverse_vocab,
                    "train_limit": cfg.reverse_train_limit, "test_limit": 500, "test_beam": 4, "log_model": False,
                    "run_name": run_name},
            "model": {"preset": cfg.reverse_preset, "src_lang": "vi", "tgt_lang": "en", "pre_norm": True},
            "train": {**budget, "warmup": 300, "lr_scale": 2.0, "max_tokens": 1500,
                      "validate_every": 300, "log_every": 25, "dev_limit": 200, "max_epochs": 50, "seed": cfg.seed},
        }
    )
    if cfg.reverse_preset == "tiny":  # tests: seconds, not minutes
        job = job.with_overrides(["train.max_tokens=512", "train.warmup=50", "train.validate_every=20", "train.log_every=5",
                                  f"train.max_steps={cfg.reverse_steps or 40}", "train.max_len=64", "train.dev_limit=20",
                                  "job.test_limit=20"])
    return job
