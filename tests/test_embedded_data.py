"""The shipped corpus in data/: big enough, with provenance, and splits that do not leak."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from mtcore.data.corpus_build import normalise_source, origin_package
from mtcore.data.paths import DATA_DIR, DEV, MONO_VI, RAW_PARALLEL, TEST

PARALLEL_COLUMNS = {"src", "tgt", "origin", "id", "context"}


@pytest.fixture(scope="module")
def raw():
    return pq.read_table(RAW_PARALLEL)


@pytest.fixture(scope="module")
def dev():
    return pq.read_table(DEV)


@pytest.fixture(scope="module")
def test_split():
    return pq.read_table(TEST)


@pytest.fixture(scope="module")
def mono():
    return pq.read_table(MONO_VI)


@pytest.fixture(scope="module")
def train_sources(raw):
    return {normalise_source(s) for s in raw["src"].to_pylist()}


def test_raw_corpus_is_large_and_varied(raw):
    assert raw.num_rows >= 100_000
    packages = {origin_package(o) for o in raw["origin"].to_pylist()}
    assert len(packages) >= 50


@pytest.mark.parametrize("name", ["raw", "dev", "test_split"])
def test_parallel_columns_and_unique_ids(request, name):
    table = request.getfixturevalue(name)
    assert PARALLEL_COLUMNS <= set(table.column_names)
    ids = table["id"].to_pylist()
    assert len(set(ids)) == len(ids)
    assert all(isinstance(s, str) for s in table["src"].to_pylist() + table["tgt"].to_pylist())


def test_raw_pairs_are_unique(raw):
    pairs = list(zip(raw["src"].to_pylist(), raw["tgt"].to_pylist()))
    assert len(set(pairs)) == len(pairs)


@pytest.mark.parametrize("name", ["dev", "test_split"])
def test_eval_split_size(request, name):
    assert request.getfixturevalue(name).num_rows >= 1_500


@pytest.mark.parametrize("name", ["dev", "test_split"])
def test_eval_catalogs_not_in_train(request, raw, name):
    held = set(request.getfixturevalue(name)["origin"].to_pylist())
    assert held and not held & set(raw["origin"].to_pylist())


@pytest.mark.parametrize("name", ["dev", "test_split"])
def test_eval_sources_not_in_train(request, train_sources, name):
    sources = [normalise_source(s) for s in request.getfixturevalue(name)["src"].to_pylist()]
    assert not set(sources) & train_sources
    assert len(set(sources)) == len(sources)  # no repeats inside a split either


def test_dev_and_test_disjoint(dev, test_split):
    dev_sources = {normalise_source(s) for s in dev["src"].to_pylist()}
    test_sources = {normalise_source(s) for s in test_split["src"].to_pylist()}
    assert not dev_sources & test_sources
    assert not set(dev["origin"].to_pylist()) & set(test_split["origin"].to_pylist())


def test_mono_is_vietnamese_text_outside_train(mono, raw):
    assert {"text", "origin", "id"} <= set(mono.column_names)
    assert mono.num_rows >= 5_000
    assert len(set(mono["id"].to_pylist())) == mono.num_rows
    stats = json.loads((DATA_DIR / "stats.json").read_text(encoding="utf-8"))
    assert stats["mono_catalogs"], "some catalogs are held out for monolingual text"
    assert not set(stats["mono_catalogs"]) & set(raw["origin"].to_pylist())


def test_stats_match_files(raw, dev, test_split, mono):
    stats = json.loads((DATA_DIR / "stats.json").read_text(encoding="utf-8"))
    assert (stats["raw_pairs"], stats["dev_pairs"], stats["test_pairs"], stats["mono_sentences"]) == (
        raw.num_rows,
        dev.num_rows,
        test_split.num_rows,
        mono.num_rows,
    )
    assert (DATA_DIR / "SOURCES.md").is_file()
