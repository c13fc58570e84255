"""Parallel-corpus cleaning: normalisation, reason-coded rules, global deduplication, on Ray Data or in process.

    from mtcore.cleaning import load_config, clean_table, clean_dataset
    kept, rejects, report = clean_table(table, load_config())          # no Ray
    result = clean_dataset("data/raw/parallel.parquet", "runs/clean")   # Ray Data

Rules are listed in `default_rules.yaml`; see `rules.py` for what each one does.
"""

from mtcore.cleaning.config import CleaningConfig, ConfigError, build_config, load_config
from mtcore.cleaning.normalize import NormalizeConfig, normalize_table
from mtcore.cleaning.pipeline import CleanResult, clean_dataset, clean_table, outputs_exist
from mtcore.cleaning.rules import REGISTRY, Rule

__all__ = [
    "REGISTRY",
    "CleanResult",
    "CleaningConfig",
    "ConfigError",
    "NormalizeConfig",
    "Rule",
    "build_config",
    "clean_dataset",
    "clean_table",
    "load_config",
    "normalize_table",
    "outputs_exist",
]
