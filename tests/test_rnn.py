"""The attention RNN encoder-decoder (`model.arch: rnn`): shapes, masking, cached decoding, teacher forcing,
overfitting a toy corpus, checkpoints, and the arch switch through Ray Train and MLflow."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
import torch

from mtcore.distributed import ray_training
from mtcore.nmt.checkpoint import load_checkpoint, save_checkpoint
from mtcore.config import ConfigError, ModelConfig, TrainConfig
from mtcore.nmt.decoding import Sampling, beam_search, greedy_decode, sample_decode, translate
from mtcore.distributed.jobs import TrainingJob
from mtcore.nmt.model import attention_maps, build_model, count_parameters
from mtcore.nmt.rnn import RNNSeq2Seq
from mtcore.nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID, train_tokenizer
from mtcore.nmt.training import fit, toy_pairs

torch.set_num_threads(1)
V = 48
VARIANTS = [  # (cell, attention, input feeding): every score with both cells, feeding on and off
    ("lstm", "general", True), ("lstm", "dot", False), ("lstm", "bahdanau", True),
    ("gru", "general", False), ("gru", "dot", True), ("gru", "bahdanau", False),
]


def rnn(cell="lstm", attention="general", feeding=True, seed=0, **kw) -> RNNSeq2Seq:
    torch.manual_seed(seed)
    cfg = ModelConfig.preset("tiny", arch="rnn", rnn_cell=cell, rnn_attention=attention, input_feeding=feeding,
                             dropout=0.0, **kw)
    return build_model(cfg, vocab_size=V).eval()


def sentence(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.randint(4, V, (n - 1,), generator=g), torch.tensor([EOS_ID])])


def padded(rows: list[torch.Tensor]) -> torch.Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows)), PAD_ID)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


# --------------------------------------------------------------------------- shapes and masking


@pytest.mark.parametrize("cell, attention, feeding", VARIANTS)
def test_shapes_and_attention_weights(cell, attention, feeding):
    model = rnn(cell, attention, feeding, rnn_hidden=48)
    src = padded([sentence(6, 1), sentence(3, 2)])  # (2, 6), row 1 padded
    tgt = padded([sentence(5, 3), sentence(5, 4)])
    memory, mask = model.encode(src)
    assert memory.shape == (2, 6, 48) and mask.shape == (2, 1, 1, 6)
    assert memory[1, 3:].abs().sum() == 0  # nothing is computed at padding
    assert model(src, tgt).shape == (2, 5, V)
    maps = attention_maps(model, src, tgt)
    assert set(maps) == {"cross"}  # an RNN encoder has no self-attention
    (w,) = maps["cross"]
    assert w.shape == (2, 1, 5, 6)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 1, 5))
    assert w[1, :, :, 3:].abs().sum() == 0  # never attends to padding


@pytest.mark.parametrize("cell, attention, feeding", VARIANTS)
def test_padding_and_batch_mates_never_change_non_pad_outputs(cell, attention, feeding):
    model = rnn(cell, attention, feeding)
    short_src, short_tgt = sentence(4, 7), sentence(3, 8)
    long_src, long_tgt = sentence(9, 9), sentence(8, 10)
    batched = model(padded([short_src, long_src]), padded([short_tgt, long_tgt]))  # short: source and target padded
    torch.testing.assert_close(batched[0, :3], model(short_src[None], short_tgt[None])[0])
    torch.testing.assert_close(batched[1], model(long_src[None], long_tgt[None])[0])
    # the backward encoder direction does see real tokens: changing one changes the output
    other = short_src.clone()
    other[2] = (other[2] + 1 - 4) % (V - 4) + 4
    assert not torch.allclose(model(short_src[None], short_tgt[None]), model(other[None], short_tgt[None]))


def test_future_target_tokens_never_change_earlier_outputs():
    model = rnn()
    src, tgt = sentence(7, 1)[None], sentence(6, 2)[None]
    changed = tgt.clone()
    changed[0, 3:] = (changed[0, 3:] + 5) % (V - 4) + 4
    a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_tied_embeddings_and_config_errors():
    model = rnn()
    assert [n for n, _ in model.named_parameters() if "embed" in n] == ["embed.weight"]
    h = torch.randn(1, 2, 64)
    torch.testing.assert_close(model.logits(h), h @ model.embed.weight.T)
    assert model.embed.weight[PAD_ID].abs().sum() == 0
    assert ModelConfig(arch="rnn", d_model=64, heads=3).heads == 3  # heads are the Transformer's only
    for kwargs, message in [
        (dict(rnn_hidden=33), "`rnn_hidden` (33) must be even"),
        (dict(d_model=63), "`d_model` (63) must be even"),
        (dict(rnn_cell="rnn"), "`rnn_cell` 'rnn': choose from ['gru', 'lstm']"),
        (dict(rnn_attention="concat"), "`rnn_attention` 'concat'"),
        (dict(teacher_forcing=1.5), "`teacher_forcing` (1.5) must be in [0, 1]"),
    ]:
        with pytest.raises(ConfigError) as err:
            ModelConfig(arch="rnn", **kwargs)
        assert message in str(err.value)


# --------------------------------------------------------------------------- decoding


def peaky(seed: int, cell: str, attention: str, feeding: bool):
    """A random tiny RNN made peaky (scaled embeddings) so that outputs vary in length and end with EOS."""
    model = rnn(cell, attention, feeding, seed=seed)
    with torch.no_grad():
        model.embed.weight.mul_(4.0)
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(3, 10, (5,), generator=g).tolist()
    return model, padded([sentence(n, seed * 10 + i) for i, n in enumerate(lens)])


@pytest.mark.parametrize("seed, variant", list(enumerate(VARIANTS)))
def test_greedy_equals_beam_one_and_cached_equals_naive(seed, variant):
    model, src = peaky(seed, *variant)
    kw = dict(max_len_a=1.0, max_len_b=6)
    greedy = greedy_decode(model, src, **kw)
    assert greedy == beam_search(model, src, beam=1, **kw)
    assert greedy == greedy_decode(model, src, use_cache=False, **kw)
    assert beam_search(model, src, beam=4, **kw) == beam_search(model, src, beam=4, use_cache=False, **kw)
    g = torch.Generator().manual_seed(3)
    assert sample_decode(model, src, Sampling(top_k=1), generator=g, **kw) == greedy


@pytest.mark.parametrize("feeding", [True, False])
def test_decode_step_matches_the_teacher_forced_forward(feeding):
    model = rnn(feeding=feeding)
    src, tgt = padded([sentence(6, 1), sentence(4, 2)]), padded([sentence(5, 3), sentence(5, 4)])
    memory, mask = model.encode(src)
    cache = model.init_cache(memory)
    steps = torch.stack([model.decode_step(tgt[:, t : t + 1], mask, cache, t) for t in range(5)], dim=1)
    torch.testing.assert_close(steps, model(src, tgt))


def test_teacher_forcing_ratio_zero_feeds_the_models_own_guesses():
    model = rnn(teacher_forcing=0.0)
    src = sentence(6, 5)[None]
    tgt = torch.cat([torch.tensor([[BOS_ID]]), sentence(7, 6)[None]], dim=1)
    other = tgt.clone()
    other[0, 1:] = (other[0, 1:] + 3 - 4) % (V - 4) + 4
    model.train()  # dropout is 0: only the ratio makes training differ from evaluation
    free = model(src, tgt)
    torch.testing.assert_close(free, model(src, other))  # gold tokens after BOS are never read
    guesses = free.argmax(-1)[0].tolist()
    model.eval()
    assert not torch.allclose(free, model(src, tgt))  # evaluation always reads the given prefix
    greedy = greedy_decode(model, src, max_len_a=0.0, max_len_b=8)[0]
    assert guesses[: len(greedy)] == greedy  # free running = greedy decoding


# --------------------------------------------------------------------------- training and checkpoints


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer([s for p in toy_pairs(360) for s in p], tmp_path_factory.mktemp("spm") / "spm.model",
                           vocab_size=500)


def test_tiny_rnn_overfits_64_pairs(tokenizer):
    pairs = toy_pairs(64)
    cfg = TrainConfig(max_tokens=256, warmup=100, lr_scale=2.0, label_smoothing=0.0, max_epochs=1000, validate_every=200,
                      log_every=10, patience=0, dev_limit=64, max_len=64, max_steps=200)
    model_cfg = ModelConfig.preset("tiny", arch="rnn", dropout=0.0)  # the defaults: LSTM, general, input feeding
    steps = []
    result = fit(cfg, model_cfg, pairs, pairs, tokenizer, on_step=steps.append)
    assert isinstance(result.model, RNNSeq2Seq)
    assert result.last_metrics["dev/bleu"] > 90, result.state.last_validation["samples"]
    assert steps[-1]["train/loss"] < steps[0]["train/loss"] / 5


def test_checkpoint_round_trip(tokenizer, tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", arch="rnn", rnn_cell="gru", rnn_attention="bahdanau", rnn_hidden=48)
    model = build_model(cfg, vocab_size=tokenizer.vocab_size).eval()
    sources = [s for s, _ in toy_pairs(6)]
    before = translate(model, tokenizer, sources, beam=3, max_len_b=5)
    save_checkpoint(tmp_path / "ckpt", model, tokenizer, train_cfg=TrainConfig(warmup=10), step=3)
    ckpt = load_checkpoint(tmp_path / "ckpt")
    assert isinstance(ckpt.model, RNNSeq2Seq) and ckpt.model_cfg == model.cfg
    assert count_parameters(ckpt.model) == count_parameters(model)
    assert translate(ckpt.model, ckpt.tokenizer, sources, beam=3, max_len_b=5) == before


# --------------------------------------------------------------------------- the switch through Ray Train and MLflow


def test_arch_switch_trains_through_ray_and_logs_to_mlflow(ray_local, mlflow_uri, tmp_path, monkeypatch, toy_corpus):
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    job = TrainingJob.from_dict({
        "job": {"train_data": toy_corpus["train"], "dev_data": toy_corpus["dev"], "test_data": toy_corpus["test"],
                "vocab_size": 400, "workers": 2, "test_limit": 10, "test_beam": 2},
        "model": {"preset": "tiny"},
        "train": {"max_tokens": 400, "warmup": 20, "validate_every": 8, "log_every": 4, "dev_limit": 10,
                  "max_steps": 8, "max_len": 32},
    }).with_overrides(["model.arch=rnn", "model.rnn_cell=gru"])
    assert job.run_name().startswith("rnn-gru-general-d64-H64-L2-")
    outcome = ray_training.run_training(job)
    assert outcome.workers == 2 and outcome.steps == 8

    client = mlflow.MlflowClient(mlflow_uri)
    run = client.get_run(outcome.mlflow_run_id)
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert (params["model.arch"], params["model.rnn_cell"], params["model.rnn_attention"]) == ("rnn", "gru", "general")
    for name in ("train/loss", "train/tokens_per_s", "dev/loss", "dev/bleu", "dev/chrf", "test/bleu", "test/chrf"):
        assert name in run.data.metrics, name
    heatmaps = [a.path for a in client.list_artifacts(run.info.run_id, "attention")]
    assert any("cross_attention" in p for p in heatmaps)
    assert not any("encoder_self_attention" in p for p in heatmaps)  # the RNN has none to draw
    assert isinstance(load_checkpoint(outcome.best_checkpoint).model, RNNSeq2Seq)
    translator = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/translator")
    out = translator.predict(["the big cat is here", "open the new file"])
    assert len(out) == 2 and all(isinstance(t, str) for t in out)


def test_tune_searches_the_architecture_and_mlflow_compares_both(ray_local, mlflow_uri, tmp_path, monkeypatch, toy_corpus):
    import yaml

    from mtcore.distributed import tune as tuning
    from mtcore.distributed.tune import TuneJob

    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    config = Path(__file__).resolve().parent.parent / "experiments" / "configs" / "tune_tiny.yaml"
    d = yaml.safe_load(config.read_text())
    d["search"]["space"] = {"model.arch": {"grid": ["transformer", "rnn"]}}
    tj = TuneJob.from_dict(d, str(config)).with_overrides(
        [f"job.train_data={toy_corpus['train']}", f"job.dev_data={toy_corpus['dev']}", f"job.test_data={toy_corpus['test']}",
         "job.vocab_size=400", "job.test_limit=10", "train.max_tokens=400", "train.max_len=32", "train.dev_limit=10",
         "train.max_steps=8"],
        num_samples=1, workers_per_trial=1, scheduler="fifo")
    out = tuning.run_search(tj, verbose=0)
    assert sorted(r.values["model.arch"] for r in out.rows) == ["rnn", "transformer"]
    assert [r.status for r in out.rows] == ["COMPLETED", "COMPLETED"]
    client = mlflow.MlflowClient(mlflow_uri)
    parent = client.get_run(out.parent_run_id)
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{out.parent_run_id}'")
    by_arch = {c.data.params["model.arch"]: c for c in children}
    assert set(by_arch) == {"transformer", "rnn"}  # one comparison in MLflow shows both architectures
    assert all("dev/bleu" in c.data.metrics and "test/bleu" in c.data.metrics for c in by_arch.values())


def test_search_space_file_replaces_the_configs_space(tmp_path):
    from mtcore.distributed.tune import DEFAULT_SEARCH, TuneJob

    configs = Path(__file__).resolve().parent.parent / "experiments" / "configs"
    tj = TuneJob.load(DEFAULT_SEARCH, space_file=configs / "space_arch.yaml")
    assert {p.key for p in tj.search.space} == {"model.arch", "model.heads", "train.warmup", "train.label_smoothing",
                                             "train.lr_scale"}
    with pytest.raises(ConfigError, match="--search-space .*nope.yaml: file not found"):
        TuneJob.load(DEFAULT_SEARCH, space_file=tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model.arch: {choice: [transformer, gru]}\n")
    with pytest.raises(ConfigError, match=r"with the space of .*bad.yaml.*`model.arch`: value 'gru'"):
        TuneJob.load(DEFAULT_SEARCH, space_file=bad)
