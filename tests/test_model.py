"""The Transformer: masks, padding, tied embeddings, attention on demand; configs: strict and named errors."""

from __future__ import annotations

import pytest
import torch

from mtcore.config import ConfigError, ModelConfig, RunConfig, TrainConfig
from mtcore.nmt.model import attention_maps, build_model, count_parameters, record_attention
from mtcore.nmt.tokenizer import EOS_ID, PAD_ID

torch.set_num_threads(1)  # a shared 2-core machine: OpenMP spinning costs more than it gives
V = 40


def tiny(pre_norm: bool = False):
    torch.manual_seed(0)
    return build_model(ModelConfig.preset("tiny", dropout=0.0, pre_norm=pre_norm), vocab_size=V).eval()


def sentence(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.randint(4, V, (n - 1,), generator=g), torch.tensor([EOS_ID])])


@pytest.mark.parametrize("pre_norm", [False, True])
def test_future_target_tokens_never_change_earlier_outputs(pre_norm):
    model = tiny(pre_norm)
    src = sentence(7, 1)[None]
    tgt = sentence(6, 2)[None]
    changed = tgt.clone()
    changed[0, 3:] = (changed[0, 3:] + 5) % (V - 4) + 4
    a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


@pytest.mark.parametrize("pre_norm", [False, True])
def test_source_padding_never_changes_non_pad_outputs(pre_norm):
    model = tiny(pre_norm)
    src, tgt = sentence(5, 3)[None], sentence(4, 4)[None]
    padded = torch.cat([src, torch.full((1, 3), PAD_ID)], dim=1)
    mem, _ = model.encode(src)
    mem_padded, _ = model.encode(padded)
    torch.testing.assert_close(mem, mem_padded[:, :5])  # encoder
    torch.testing.assert_close(model(src, tgt), model(padded, tgt))  # decoder through cross-attention


def test_target_padding_never_changes_non_pad_outputs():
    model = tiny()
    src, tgt = sentence(5, 5)[None], sentence(4, 6)[None]
    padded = torch.cat([tgt, torch.full((1, 3), PAD_ID)], dim=1)
    torch.testing.assert_close(model(src, tgt), model(src, padded)[:, :4])


def test_batching_with_longer_sentences_changes_nothing():
    model = tiny()
    short_src, short_tgt = sentence(4, 7), sentence(3, 8)
    long_src, long_tgt = sentence(9, 9), sentence(8, 10)
    src = torch.full((2, 9), PAD_ID)
    tgt = torch.full((2, 8), PAD_ID)
    src[0, :4], src[1] = short_src, long_src
    tgt[0, :3], tgt[1] = short_tgt, long_tgt
    batched = model(src, tgt)
    torch.testing.assert_close(batched[0, :3], model(short_src[None], short_tgt[None])[0])
    torch.testing.assert_close(batched[1], model(long_src[None], long_tgt[None])[0])


def test_embeddings_are_shared_and_scaled():
    model = tiny()
    names = [n for n, _ in model.named_parameters()]
    assert [n for n in names if "embed" in n] == ["embed.weight"]  # one matrix: encoder, decoder, output
    h = torch.randn(1, 2, 64)
    torch.testing.assert_close(model.logits(h), h @ model.embed.weight.T)
    assert model.embed.weight[PAD_ID].abs().sum() == 0


def test_parameter_count_of_base_matches_the_paper_shape():
    # 6+6 layers of d=512, d_ff=2048 and a 37000 shared vocabulary: ~63M (the paper's 65M uses its own vocab)
    model = build_model(ModelConfig.preset("base"), vocab_size=37000)
    assert 60e6 < count_parameters(model) < 66e6


def test_attention_weights_only_on_demand_and_consistent():
    model = tiny()
    src = torch.stack([sentence(6, 11), torch.cat([sentence(4, 12), torch.full((2,), PAD_ID)])])
    tgt = torch.stack([sentence(5, 13), sentence(5, 14)])
    fast = model(src, tgt)
    assert all(layer.self_attn.recorded is None for layer in model.encoder)
    with record_attention(model) as maps:
        slow = model(src, tgt)
    torch.testing.assert_close(fast, slow)  # the explicit path computes the same thing
    maps = attention_maps(model, src, tgt)
    assert [m.shape for m in maps["encoder"]] == [(2, 4, 6, 6)] * 2
    assert [m.shape for m in maps["cross"]] == [(2, 4, 5, 6)] * 2
    torch.testing.assert_close(maps["cross"][0].sum(-1), torch.ones(2, 4, 5))
    assert maps["cross"][1][1, :, :, 4:].abs().sum() == 0  # padding receives no attention
    assert maps["decoder"][0][0, :, 0, 1:].abs().sum() == 0  # causal


# --------------------------------------------------------------------------- configs


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(heads=6), "`heads` (6) must divide `d_model` (512)"),
        (dict(d_model=511, heads=7), "`d_model` (511) must be even"),
        (dict(dropout=1.5), "`dropout` (1.5) must be in [0, 1)"),
        (dict(arch="lstm"), "`arch` 'lstm' is not available; choose from ['transformer', 'rnn']"),
        (dict(layers=0), "`layers` (0) must be positive"),
        (dict(src_lang="vi"), "`src_lang` and `tgt_lang` are both 'vi'"),
    ],
)
def test_model_config_errors_name_the_culprit(kwargs, message):
    with pytest.raises(ConfigError) as err:
        ModelConfig(**kwargs)
    assert message in str(err.value)


def test_presets():
    assert ModelConfig.preset("tiny").d_model == 64
    small = ModelConfig.preset("small")
    assert (small.d_model, small.layers, small.heads, small.d_ff) == (256, 3, 4, 1024)
    assert ModelConfig.preset("base") == ModelConfig()
    assert ModelConfig.preset("big").d_model == 1024
    with pytest.raises(ConfigError, match="unknown model preset 'huge'"):
        ModelConfig.preset("huge")


def test_from_dict_is_strict():
    cfg = RunConfig.from_dict({"model": {"preset": "small", "heads": 8}, "train": {"warmup": 100, "lr_scale": 2}})
    assert (cfg.model.d_model, cfg.model.heads, cfg.train.warmup, cfg.train.lr_scale) == (256, 8, 100, 2.0)
    with pytest.raises(ConfigError, match=r"unknown `model` key\(s\) \['head', 'size'\]"):
        ModelConfig.from_dict({"head": 4, "size": 1})
    with pytest.raises(ConfigError, match="`train.warmup` must be int, got str '100'"):
        TrainConfig.from_dict({"warmup": "100"})
    with pytest.raises(ConfigError, match="`model.pre_norm` must be bool"):
        ModelConfig.from_dict({"pre_norm": 1})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['optim'\]"):
        RunConfig.from_dict({"optim": {}})


def test_with_overrides():
    cfg = RunConfig().with_overrides(["model.heads=4", "train.label_smoothing=0.2", "model.pre_norm=true"])
    assert (cfg.model.heads, cfg.train.label_smoothing, cfg.model.pre_norm) == (4, 0.2, True)
    assert RunConfig().with_overrides(["model.preset=tiny", "model.layers=3"]).model.layers == 3
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="`heads` \\(7\\) must divide `d_model` \\(512\\)"):
        RunConfig().with_overrides(["model.heads=7"])
    with pytest.raises(ConfigError, match="must start with 'model.', 'train.' or 'job.'"):
        RunConfig().with_overrides(["heads=4"])
    with pytest.raises(ConfigError, match="unknown `train` key"):
        RunConfig().with_overrides(["train.warmpu=10"])
