"""Shared fixtures: one real local Ray instance per test session (starting Ray costs seconds)."""

from __future__ import annotations

import os

import pytest
import torch

# Two cores shared by Ray workers and the test process: one intra-op thread each avoids
# oversubscription that makes small-model decoding tens of times slower.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray instance sized to this machine, shared by every test that needs Ray."""
    os.environ.pop("RAY_ADDRESS", None)  # tests never touch a user's cluster
    from mtcore.distributed.cluster import init_ray

    ray = init_ray(num_cpus=min(2, os.cpu_count() or 1), object_store_memory=256 * 1024**2)
    yield ray
    ray.shutdown()


@pytest.fixture
def mlflow_uri(tmp_path, monkeypatch):
    """A real MLflow SQLite store private to one test."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.fixture
def toy_corpus(tmp_path):
    """Train/dev/test Parquet files (240/30/30 toy pairs) for tiny real training runs: {split: path}."""
    import pyarrow as pa

    from mtcore.data.corpus import write_parquet
    from mtcore.nmt.training import toy_pairs

    pairs = toy_pairs(300, seed=1)

    def table(rows, name):
        return pa.table({"src": [s for s, _ in rows], "tgt": [t for _, t in rows], "origin": ["toy"] * len(rows),
                         "id": [f"{name}{i}" for i in range(len(rows))]})

    return {name: str(write_parquet(table(rows, name), tmp_path / f"{name}.parquet"))
            for name, rows in (("train", pairs[:240]), ("dev", pairs[240:270]), ("test", pairs[270:]))}
