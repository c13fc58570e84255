"""bf16 autocast where the hardware has it: the choice, and attention that stays fp32 on the CPU."""

from __future__ import annotations

import contextlib

import pytest
import torch

from mtcore import hardware
from mtcore.config import ModelConfig
from mtcore.nmt import precision
from mtcore.nmt.model import MultiHeadAttention, build_model


def test_bf16_is_used_only_where_asked_and_native(monkeypatch):
    assert not precision.uses_bf16("cpu", False) and not precision.uses_bf16("cuda", False)
    monkeypatch.setattr(hardware, "cpu_bf16_is_fast", lambda: True)
    assert precision.uses_bf16("cpu", True)
    assert hardware.precision_label(False, True) == "bf16 autocast (CPU with fast native bf16)"
    monkeypatch.setattr(hardware, "cpu_bf16_is_fast", lambda: False)
    assert not precision.uses_bf16("cpu", True)
    for flags, label in ((True, "fp32 (bf16 is not faster on this CPU)"), (False, "fp32 (this CPU has no native bf16)")):
        monkeypatch.setattr(hardware, "cpu_has_bf16_flags", lambda: flags)
        assert hardware.precision_label(False, True) == label
    assert hardware.precision_label(True, True) == "bf16 autocast"  # GPU workers decide on their own GPUs
    assert hardware.precision_label(True, False) == hardware.precision_label(False, False) == "fp32"


def test_cpu_flags_are_read_from_cpuinfo():
    try:
        flags = open("/proc/cpuinfo").read().split()
    except OSError:
        flags = []
    assert hardware.cpu_has_bf16_flags() == ("avx512_bf16" in flags or "amx_bf16" in flags)


def test_bf16_flags_are_not_enough_the_speedup_is_measured_once_and_kept(monkeypatch, tmp_path):
    """A Xeon VM listing avx512_bf16 trained at 0.71x fp32's speed in bf16: the measured speed-up decides, cached per CPU."""
    monkeypatch.setattr(hardware, "CACHE_FILE", tmp_path / "mtcore" / "cpu_bf16.json")
    calls = []

    def measured(speedup):
        def measure():
            calls.append(speedup)
            return speedup
        return measure

    hardware.cpu_bf16_is_fast.cache_clear()
    try:
        monkeypatch.setattr(hardware, "cpu_has_bf16_flags", lambda: False)
        monkeypatch.setattr(hardware, "measure_bf16_speedup", measured(3.0))
        assert not hardware.cpu_bf16_is_fast() and calls == []  # no instructions: nothing to measure
        hardware.cpu_bf16_is_fast.cache_clear()
        monkeypatch.setattr(hardware, "cpu_has_bf16_flags", lambda: True)
        monkeypatch.setattr(hardware, "measure_bf16_speedup", measured(0.79))
        assert not hardware.cpu_bf16_is_fast() and calls == [0.79]
        hardware.cpu_bf16_is_fast.cache_clear()
        monkeypatch.setattr(hardware, "measure_bf16_speedup", measured(3.0))
        assert not hardware.cpu_bf16_is_fast() and calls == [0.79]  # read back, not measured again
        import json

        kept = json.loads(hardware.CACHE_FILE.read_text())
        assert list(kept.values()) == [0.79] and "torch" in next(iter(kept))
        hardware.CACHE_FILE.write_text(json.dumps({k: 1.6 for k in kept}))
        hardware.cpu_bf16_is_fast.cache_clear()
        assert hardware.cpu_bf16_is_fast() and calls == [0.79]
        hardware.CACHE_FILE.write_text("not json")  # a damaged cache is measured again, then rewritten
        hardware.cpu_bf16_is_fast.cache_clear()
        assert hardware.cpu_bf16_is_fast() and calls == [0.79, 3.0]
        assert list(json.loads(hardware.CACHE_FILE.read_text()).values()) == [3.0]
    finally:
        hardware.cpu_bf16_is_fast.cache_clear()


def test_the_speedup_is_measured_on_this_cpu():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        speedup = hardware.measure_bf16_speedup()  # on one thread
        assert 0.05 < speedup < 50 and torch.get_num_threads() == 2  # the caller's thread count is restored
    finally:
        torch.set_num_threads(threads)


def test_validation_on_the_cpu_is_fp32():
    assert isinstance(precision.validation_autocast(torch.device("cpu"), True), contextlib.nullcontext)


def test_attention_under_cpu_autocast_computes_in_fp32(monkeypatch):
    import torch.nn.functional as F

    seen = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.append((q.dtype, k.dtype, v.dtype, torch.is_autocast_enabled("cpu")))
        return sdpa(q, k, v, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4, dropout=0.0).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False
    ref = attn(x, x, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = attn(x, x, mask)
    assert seen[-1] == (torch.float32, torch.float32, torch.float32, False)  # attention itself: fp32, autocast off
    assert y.dtype == torch.bfloat16  # the projections around it: bf16
    torch.testing.assert_close(y.float(), ref, atol=0.05, rtol=0.05)


def _train(autocast: bool, steps: int = 60) -> list[float]:
    from mtcore.config import TrainConfig
    from mtcore.nmt.loss import label_smoothed_loss
    from mtcore.nmt.training import make_optimizer

    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, heads=4, layers=1, d_ff=64, vocab_size=40, dropout=0.0, attention_dropout=0.0)
    model = build_model(cfg)
    opt, sched = make_optimizer(model, TrainConfig(warmup=10, lr_scale=2.0), cfg.d_model)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 40, (8, 7), generator=g)
    tgt_in, tgt_out = torch.randint(4, 40, (8, 6), generator=g), torch.randint(4, 40, (8, 6), generator=g)
    losses = []
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(src, tgt_in)
        loss, _, n = label_smoothed_loss(logits, tgt_out, 0.0)
        (loss / n).backward()
        assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
        opt.step(), sched.step(), opt.zero_grad(set_to_none=True)
        losses.append(loss.item() / n)
    return losses


def test_a_model_trains_under_cpu_autocast_as_in_fp32():
    """bf16 autocast on the CPU: fp32 gradients, and the loss follows the fp32 run's on a memorised batch."""
    bf16, fp32 = _train(True), _train(False)
    assert fp32[-1] < 0.3 * fp32[0]
    assert bf16[-1] < 0.3 * bf16[0]
    assert abs(bf16[-1] - fp32[-1]) < 0.1 * fp32[0]
