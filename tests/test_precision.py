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
    for native in (True, False):
        monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: native)
        assert precision.uses_bf16("cpu", True) == native
        assert hardware.precision_label(False, True) == ("bf16 autocast (CPU with native bf16)" if native
                                                         else "fp32 (this CPU has no native bf16)")
    assert hardware.precision_label(True, True) == "bf16 autocast"  # GPU workers decide on their own GPUs
    assert hardware.precision_label(True, False) == hardware.precision_label(False, False) == "fp32"


def test_cpu_flags_are_read_from_cpuinfo():
    try:
        flags = open("/proc/cpuinfo").read().split()
    except OSError:
        flags = []
    assert hardware.cpu_has_native_bf16() == ("avx512_bf16" in flags or "amx_bf16" in flags)


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
