"""Dual conditional cross-entropy with two real (tiny) translation models, one per direction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtcore.alignment import negatives
from mtcore.alignment.dual_xent import DirectionError, cross_entropies, dual_xent, dual_xent_scores
from mtcore.config import ModelConfig, TrainConfig
from mtcore.nmt.checkpoint import load_checkpoint, save_checkpoint
from mtcore.nmt.decoding import encode_sources, sequence_scores
from mtcore.nmt.tokenizer import train_tokenizer
from mtcore.nmt.training import fit, toy_pairs

torch.set_num_threads(1)
PAIRS = toy_pairs(360)
TRAIN, HELD_OUT = PAIRS[:300], PAIRS[300:]


def train_both_directions(pairs: list[tuple[str, str]], directory, steps: int = 600) -> dict:
    """Tiny en→vi and vi→en checkpoints trained on `pairs` (a shared SentencePiece model), by name."""
    tok = train_tokenizer([s for p in pairs for s in p], directory / "spm.model", vocab_size=500)
    cfg = TrainConfig(max_tokens=512, warmup=60, lr_scale=1.0, label_smoothing=0.0, max_epochs=1000, validate_every=0,
                      log_every=10**6, patience=0, max_len=64, max_steps=steps)
    out = {}
    for name, (src, tgt), oriented in (("forward", ("en", "vi"), pairs), ("reverse", ("vi", "en"), [(t, s) for s, t in pairs])):
        torch.manual_seed(0)
        result = fit(cfg, ModelConfig.preset("tiny", dropout=0.0, src_lang=src, tgt_lang=tgt), oriented, oriented[:8], tok)
        out[name] = load_checkpoint(save_checkpoint(directory / name, result.model, tok))
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return train_both_directions(TRAIN, tmp_path_factory.mktemp("nmt"))


def test_right_pairs_beat_the_translation_of_the_most_similar_other_sentence(models):
    src, tgt = [s for s, _ in HELD_OUT], [t for _, t in HELD_OUT]
    partner = negatives.fuzzy_partners(src, tgt, None)  # "the big cat" with the translation of "the small cat"
    rows = np.flatnonzero(partner >= 0)
    assert len(rows) >= 40
    sources, right_tgt, near_tgt = [src[i] for i in rows], [tgt[i] for i in rows], [tgt[j] for j in partner[rows]]
    # Models this small are weak (the reverse one most), so the bar is "clearly better than chance (0.5)".
    right = dual_xent_scores(models["forward"], models["reverse"], sources, right_tgt)
    near = dual_xent_scores(models["forward"], models["reverse"], sources, near_tgt)
    assert (right > near).mean() >= 0.7, (right - near)
    forward = cross_entropies(models["forward"], sources, right_tgt) < cross_entropies(models["forward"], sources, near_tgt)
    assert forward.mean() >= 0.8


def test_scores_come_back_in_input_order(models):
    fwd = models["forward"]
    src, tgt = [s for s, _ in HELD_OUT[:30]], [t for _, t in HELD_OUT[:30]]
    src[3] = src[3] + " " + src[4]  # lengths differ, so the length-sorted batches reorder the pairs
    direct = -np.asarray(sequence_scores(fwd.model, encode_sources(fwd.tokenizer, src, max_len=256),
                                         fwd.tokenizer.encode(tgt), batch_size=7))
    np.testing.assert_allclose(cross_entropies(fwd, src, tgt, batch_size=7), direct, rtol=1e-4, atol=1e-5)


def test_the_cost_rewards_agreement_between_the_directions():
    # Same mean cross-entropy (2.0), but the directions disagree in the second pair: it costs more.
    scores = dual_xent(np.array([2.0, 1.0]), np.array([2.0, 3.0]))
    np.testing.assert_allclose(scores, [-2.0, -4.0])


def test_two_models_of_the_same_direction_are_refused(models):
    with pytest.raises(DirectionError, match=r"en→vi and .* is en→vi"):
        dual_xent_scores(models["forward"], models["forward"], ["a"], ["b"])
