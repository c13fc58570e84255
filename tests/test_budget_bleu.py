"""benchmarks/budget_bleu.py's anchor: HF's MarianMTModel trained with mtcore's recipe or with HF's own, tiny sizes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("transformers")  # the `bench` extra; the test extra installs it

from mtcore.distributed.jobs import TrainingJob  # noqa: E402
from mtcore.nmt.tokenizer import train_tokenizer  # noqa: E402
from mtcore.nmt.training import toy_pairs  # noqa: E402


def load_benchmark():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "budget_bleu.py"
    spec = importlib.util.spec_from_file_location("budget_bleu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_benchmark()


@pytest.fixture(autouse=True)
def keep_torch_threads():
    """train_marian sets every core as a torch thread (as a user's HF run would); the suite's other tests run on
    one (conftest): left at 2, test_export's fixture model trained with other sums and broke an exact beam tie."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_grouped_batches_cover_every_sentence_once_an_epoch_in_a_new_order():
    lengths = [(i * 7) % 23 + 1 for i in range(500)]
    batches = bench.GroupedSentenceBatches(lengths, 16, seed=0)
    first = list(batches)
    assert len(first) == len(batches) == 32  # 500 / 16, the last one short
    assert sorted(i for b in first for i in b) == list(range(500))
    assert all(len(b) == 16 for b in first[:-1]) and len(first[-1]) == 500 - 31 * 16
    # grouped by length: a batch pads far less than a batch of random sentences would
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in first) / len(first)
    assert spread < 5
    batches.set_epoch(1)
    assert [i for b in batches for i in b] != [i for b in first for i in b]


@pytest.mark.parametrize("recipe", ["mtcore", "hf"])
def test_the_anchor_trains_with_either_recipe(recipe, tmp_path, toy_corpus):
    spm = tmp_path / "spm.model"
    train_tokenizer([s for p in toy_pairs(300, seed=1) for s in p], spm, vocab_size=500)
    job = TrainingJob.load(None, ["model.preset=tiny", "train.max_tokens=256", "train.warmup=20", "train.bf16=false",
                                  f"job.train_data={toy_corpus['train']}"])
    lines: list[str] = []
    model, steps, tok_s, tok = bench.train_marian(job, toy_corpus["train"], str(spm), minutes=0.05, workers=2,
                                                  log=lines.append, recipe=recipe, lr=1e-3, batch=8)
    assert steps > 0 and tok_s > 0 and not model.training
    recipe_lines = [line for line in lines if "HF's recipe" in line]
    if recipe == "hf":  # AdamW at the given rate, a linear decay over 3 epochs of 240 / 8 batches, no smoothing
        assert recipe_lines == ["anchor: HF's recipe, AdamW lr 0.001, linear decay over 3 epochs (90 steps), "
                                "8 sentences a batch, no label smoothing"]
    else:
        assert recipe_lines == []
    hyps, sent_s = bench.decode_marian(model, tok, ["hello world", "the red house"], beam=2)
    assert len(hyps) == 2 and sent_s > 0
