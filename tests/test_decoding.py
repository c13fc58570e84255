"""Decoding: greedy == beam 1, cached == naive, sampling limits, length penalty, noise for back-translation."""

from __future__ import annotations

import random

import pytest
import torch

from mtcore.config import ModelConfig
from mtcore.nmt.decoding import (
    Sampling,
    beam_search,
    encode_sources,
    greedy_decode,
    length_penalty,
    max_lengths,
    sample_decode,
    top_candidates,
)
from mtcore.nmt.model import build_model
from mtcore.nmt.noise import noise_text, noise_words
from mtcore.nmt.tokenizer import BOS_ID, BT_TAG, EOS_ID, PAD_ID, train_tokenizer

torch.set_num_threads(1)
V = 48


def model_and_sources(seed: int, batch: int = 5):
    """A random tiny model made peaky (scaled embeddings) so that outputs vary in length and end with EOS."""
    torch.manual_seed(seed)
    model = build_model(ModelConfig.preset("tiny", dropout=0.0), vocab_size=V).eval()
    with torch.no_grad():
        model.embed.weight.mul_(4.0)
    lens = torch.randint(3, 10, (batch,))
    src = torch.full((batch, int(lens.max())), PAD_ID)
    for i, n in enumerate(lens.tolist()):
        src[i, : n - 1] = torch.randint(4, V, (n - 1,))
        src[i, n - 1] = EOS_ID
    return model, src


KW = dict(max_len_a=1.0, max_len_b=6)


@pytest.mark.parametrize("seed", range(4))
def test_greedy_equals_beam_one(seed):
    model, src = model_and_sources(seed)
    assert greedy_decode(model, src, **KW) == beam_search(model, src, beam=1, **KW)


@pytest.mark.parametrize("seed", range(3))
def test_cached_equals_naive(seed):
    model, src = model_and_sources(seed)
    assert greedy_decode(model, src, **KW) == greedy_decode(model, src, use_cache=False, **KW)
    for beam in (2, 5):
        cached = beam_search(model, src, beam=beam, n_best=beam, **KW)
        naive = beam_search(model, src, beam=beam, n_best=beam, use_cache=False, **KW)
        assert [[h for _, h in sent] for sent in cached] == [[h for _, h in sent] for sent in naive]
        for c, n in zip(cached, naive):
            assert [s for s, _ in c] == pytest.approx([s for s, _ in n], abs=1e-4)


@pytest.mark.parametrize("vocab", [8000, 400, 401, 48, 11])  # many chunks, few, a prime size (no chunking), tiny
def test_top_candidates_equal_the_vocabulary_wide_top_k(vocab):
    """The chunked selection returns exactly what log-softmax + add + top-k over beams × vocabulary returns,
    with beams at -inf (the first step) and PAD/BOS never chosen."""
    gen = torch.Generator().manual_seed(vocab)
    n, k = 7, 5
    logits = torch.randn(n * k, vocab, generator=gen) * 4
    logits[:, PAD_ID] += 50.0  # would win if PAD were not excluded
    scores = torch.randn(n, k, generator=gen) * 3
    scores[0, 1:] = float("-inf")
    lp = logits.log_softmax(dim=-1)
    lp[:, PAD_ID] = lp[:, BOS_ID] = float("-inf")
    expected = (scores[:, :, None] + lp.view(n, k, vocab)).view(n, k * vocab).topk(2 * k, dim=1)
    values, index = top_candidates(logits.clone(), scores, 2 * k)
    assert torch.equal(index, expected.indices)
    torch.testing.assert_close(values, expected.values, rtol=0, atol=1e-4)
    assert not bool(((index % vocab == PAD_ID) | (index % vocab == BOS_ID)).any())


def test_outputs_vary_and_respect_the_length_limit():
    model, src = model_and_sources(0, batch=8)
    limits = max_lengths(model, src, **{"a": 1.0, "b": 6})
    for hyps in (greedy_decode(model, src, **KW), beam_search(model, src, beam=4, **KW)):
        assert all(len(h) <= lim for h, lim in zip(hyps, limits.tolist()))
        assert all(EOS_ID not in h and PAD_ID not in h for h in hyps)
    assert len({len(h) for h in greedy_decode(model, src, **KW)}) > 1  # some stop early, some at the limit


def test_beam_hypotheses_are_sorted_and_scored_with_the_length_penalty():
    model, src = model_and_sources(1, batch=2)
    nbest = beam_search(model, src[:1], beam=4, n_best=4, len_penalty=1.0, **KW)[0]
    scores = [s for s, _ in nbest]
    assert scores == sorted(scores, reverse=True)
    # recompute the best hypothesis' normalised score by teacher forcing
    best = nbest[0][1]
    tgt = torch.tensor([[2] + best])
    lp = model(src[:1], tgt).log_softmax(-1)[0]
    targets = best + [EOS_ID]  # every hypothesis ends with EOS, at the length limit too
    logp = sum(lp[i, t].item() for i, t in enumerate(targets))
    assert scores[0] == pytest.approx(logp / length_penalty(len(targets), 1.0), abs=1e-3)


@pytest.mark.parametrize("seed", range(6))
def test_hypotheses_at_the_length_limit_pay_for_their_eos(seed):
    """Every n-best score is its hypothesis' teacher-forced log-probability *with* EOS over the GNMT penalty,
    including those that ran to the limit (forced EOS, as in fairseq). Before, those were finished as they
    stood, one term short, and a degenerate run to the limit outranked hypotheses that had ended."""
    model, src = model_and_sources(seed, batch=4)
    with torch.no_grad():
        model.embed.weight.mul_(0.25)  # flatter: many hypotheses reach the limit
    kw = dict(max_len_a=0.0, max_len_b=4)
    nbest = beam_search(model, src, beam=4, n_best=4, len_penalty=1.0, **kw)
    at_limit = 0
    for i, hyps in enumerate(nbest):
        assert [s for s, _ in hyps] == sorted((s for s, _ in hyps), reverse=True)
        for score, hyp in hyps:
            assert len(hyp) <= 3  # the 4th position is the EOS
            at_limit += len(hyp) == 3
            tgt = torch.tensor([[BOS_ID] + hyp])
            lp = model(src[i : i + 1], tgt).log_softmax(-1)[0]
            logp = sum(lp[j, t].item() for j, t in enumerate(hyp + [EOS_ID]))
            assert score == pytest.approx(logp / length_penalty(len(hyp) + 1, 1.0), abs=1e-4)
    assert at_limit  # the case this test is about happened
    greedy = greedy_decode(model, src, **kw)
    assert all(len(h) <= 3 for h in greedy) and greedy == beam_search(model, src, beam=1, **kw)


def test_length_penalty_formula():
    assert length_penalty(1, 0.0) == 1.0
    assert length_penalty(7, 0.7) == pytest.approx((12 / 6) ** 0.7)


def test_sampling_with_top_k_one_is_greedy_and_seeded_sampling_is_reproducible():
    model, src = model_and_sources(2)
    greedy = greedy_decode(model, src, **KW)
    assert sample_decode(model, src, Sampling(top_k=1), **KW) == greedy
    assert sample_decode(model, src, Sampling(top_p=1e-6), **KW) == greedy
    draw = lambda: sample_decode(model, src, Sampling(temperature=2.0), generator=torch.Generator().manual_seed(5), **KW)
    assert draw() == draw()
    with pytest.raises(ValueError, match="`top_p`"):
        Sampling(top_p=0.0)


def test_sources_can_carry_the_bt_tag(tmp_path):
    texts = ["open the file", "mở tệp", "the red window", "cửa sổ đỏ"] * 5
    tok = train_tokenizer(texts, tmp_path / "spm.model", vocab_size=300)
    plain = encode_sources(tok, ["open the file"])[0]
    tagged = encode_sources(tok, ["open the file"], bt_tag=True)[0]
    assert tok.bt_tag_id in tagged[:2] and tagged[-len(plain) :] == plain and plain[-1] == EOS_ID
    assert encode_sources(tok, [f"{BT_TAG} open the file"])[0] == tagged  # what a tagged BT corpus holds


# --------------------------------------------------------------------------- noise (Edunov et al. 2018)


def test_noise_rates_and_local_shuffle():
    rng = random.Random(0)
    words = list(range(20))
    deleted = replaced = total = 0
    for _ in range(500):
        out = noise_words(words, rng, filler=-1, max_shuffle=1)  # no shuffle: count edits
        deleted += len(words) - len(out)
        replaced += out.count(-1)
        total += len(words)
    assert deleted / total == pytest.approx(0.1, abs=0.02)
    assert replaced / total == pytest.approx(0.1, abs=0.02)
    for _ in range(200):
        out = noise_words(words, rng, p_delete=0.0, p_replace=0.0)
        assert sorted(out) == words
        assert all(abs(pos - w) < 3 for pos, w in enumerate(out))  # never moves 3 or more positions
    assert noise_words(words, random.Random(1)) == noise_words(words, random.Random(1))


def test_noise_text_keeps_the_tag_and_never_empties():
    out = noise_text(f"{BT_TAG} tôi thấy con mèo", random.Random(3))
    assert out.split()[0] == BT_TAG
    assert noise_words(["một"], random.Random(0), p_delete=1.0) == ["một"]


# --------------------------------------------------------------------------- DecodeConfig: one home for decoding settings


def test_every_decoding_entry_point_takes_its_defaults_from_decode_config():
    from mtcore.backtranslation.config import BTConfig
    from mtcore.config import DecodeConfig, TrainConfig
    from mtcore.nmt.translate import build_parser, decode_config

    args = build_parser().parse_args(["--model", "m"])
    assert decode_config(args) == DecodeConfig()
    train = TrainConfig(beam=3, len_penalty=0.2, max_len_a=2.0, max_len_b=4)
    assert train.validation_decode() == DecodeConfig(beam=3, len_penalty=0.2, max_len_a=2.0, max_len_b=4, batch_size=64)
    assert BTConfig(mode="beam", beam=4).decode() == DecodeConfig(beam=4)
    sampled = BTConfig(mode="sample", top_k=7, temperature=0.5).decode()
    assert (sampled.sampling.top_k, sampled.sampling.temperature) == (7, 0.5)


def test_decode_config_names_the_key_at_fault():
    from mtcore.config import ConfigError, DecodeConfig

    with pytest.raises(ConfigError, match="did you mean `beam`"):
        DecodeConfig().replace(beams=2)
    with pytest.raises(ConfigError, match="`n_best` \\(3\\) needs beam search with `beam` >= 3"):
        DecodeConfig(beam=2, n_best=3)
    with pytest.raises(ConfigError, match="`batch_size`"):
        DecodeConfig(batch_size=0)
    with pytest.raises(ConfigError, match="`decode.beam` must be int"):
        DecodeConfig.from_params({"beam": "five"})
    assert DecodeConfig.from_params({"beam": "2", "len_penalty": "0"}) == DecodeConfig(beam=2, len_penalty=0.0)


def test_a_decode_config_and_the_same_keywords_decode_alike():
    from mtcore.config import DecodeConfig
    from mtcore.nmt.decoding import translate_ids

    model, src = model_and_sources(3, batch=4)
    sources = [[t for t in row if t != PAD_ID] for row in src.tolist()]
    cfg = DecodeConfig(beam=3, len_penalty=0.0, max_len_a=1.0, max_len_b=3, batch_size=2)
    assert translate_ids(model, sources, cfg) == translate_ids(model, sources, beam=3, len_penalty=0.0, max_len_a=1.0,
                                                              max_len_b=3, batch_size=2)
    assert translate_ids(model, sources) == translate_ids(model, sources, DecodeConfig(beam=1))  # the default is greedy
    assert translate_ids(model, sources, cfg, beam=1) == translate_ids(model, sources, cfg.replace(beam=1))


# --------------------------------------------------------------------------- length limits without float64 on the device


def _float64_limits(src_len: list[int], a: float, b: int, max_positions: int) -> list[int]:
    """The limits as they were computed on the device, in float64 (which MPS lacks)."""
    limit = (a * torch.tensor(src_len).double()).floor() + float(b)
    return limit.clamp(min=1, max=max_positions - 1).long().tolist()


@pytest.mark.parametrize("a, b", [(1.5, 10), (1.0, 6), (0.01, 0), (0.7, 3), (1.1, 0), (1e19, 0), (1.5, 2**63 - 1),
                                  (3.3, 1000)])
def test_length_limits_are_the_float64_ones_computed_in_python(a, b):
    from mtcore.nmt.decoding import length_limit

    lengths = [1, 2, 3, 7, 10, 29, 30, 100, 511, 1023]
    assert [length_limit(n, a, b, 1024) for n in lengths] == _float64_limits(lengths, a, b, 1024)
    model, src = model_and_sources(0, batch=4)
    limits = max_lengths(model, src, a, b)
    assert limits.dtype == torch.long and limits.device == src.device
    assert limits.tolist() == _float64_limits((src != PAD_ID).sum(dim=1).tolist(), a, b, model.cfg.max_positions)


def test_a_run_decode_takes_the_runs_length_penalty_and_bound_but_not_its_validation_beam():
    from mtcore.config import DecodeConfig, TrainConfig
    from mtcore.nmt.decoding import run_decode

    train = TrainConfig(beam=3, len_penalty=1.2, max_len_a=2.5, max_len_b=4)
    assert run_decode(train) == DecodeConfig(len_penalty=1.2, max_len_a=2.5, max_len_b=4)  # beam: DecodeConfig's 5
    assert run_decode(None) == DecodeConfig() and run_decode(None, DecodeConfig(beam=2)) == DecodeConfig(beam=2)
    assert run_decode(train, DecodeConfig(beam=2, batch_size=8)) == DecodeConfig(beam=2, batch_size=8, len_penalty=1.2,
                                                                                 max_len_a=2.5, max_len_b=4)
