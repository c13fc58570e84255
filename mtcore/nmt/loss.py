"""Label-smoothed cross-entropy (§5.4 of Vaswani et al.; Szegedy et al. 2016), with a hand-written backward.

The loss over the vocabulary is (1 - eps) * -log p(gold) + eps * mean_v(-log p(v)), as
`F.cross_entropy(label_smoothing=eps)`. Autograd through log_softmax, gather and mean builds three
(B, T, V) gradients and adds them; their sum has a closed form, computed here in one pass:

    d loss / d logits = g_nll * (softmax - onehot(gold)) + g_smooth * (softmax - 1/V)

where g_nll, g_smooth are the incoming gradients of the per-position NLL and smoothing terms. On
the CPU presets, whose output projection over an 8k vocabulary is half the step, this took the
step from 367 to 305 ms in fp32 (RESULTS.md, "bf16 on the CPU").
"""

from __future__ import annotations

import torch

from mtcore.nmt.tokenizer import PAD_ID


class _SmoothedTerms(torch.autograd.Function):
    """logits (..., V), target (...) -> per-position (-log p(gold), mean_v -log p(v)), both fp32."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor):
        lprobs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)  # fp32 whatever the logits' dtype
        nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        smooth = -lprobs.mean(dim=-1)
        ctx.save_for_backward(lprobs, target)
        ctx.logits_dtype = logits.dtype
        return nll, smooth

    @staticmethod
    def backward(ctx, g_nll: torch.Tensor, g_smooth: torch.Tensor):
        lprobs, target = ctx.saved_tensors
        grad = lprobs.exp()  # softmax; a new tensor, so a second backward (retain_graph) still reads lprobs
        grad.mul_((g_nll + g_smooth).unsqueeze(-1))
        grad.scatter_add_(-1, target.unsqueeze(-1), -g_nll.unsqueeze(-1))
        grad.sub_((g_smooth / lprobs.size(-1)).unsqueeze(-1))
        return grad.to(ctx.logits_dtype), None


def smoothed_sums(
    logits: torch.Tensor, target: torch.Tensor, eps: float, ignore_index: int = PAD_ID
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums over non-padding targets of the smoothed loss and of the plain NLL, as 0-dim tensors.

    Nothing here waits for the device (no boolean indexing, no count read back), so a GPU training
    step can be queued while the previous one runs; the training loop counts tokens on the host.
    """
    nll, smooth = _SmoothedTerms.apply(logits, target)  # (B, T) each
    keep = target != ignore_index
    nll, smooth = torch.where(keep, nll, 0.0).sum(), torch.where(keep, smooth, 0.0).sum()
    return (1.0 - eps) * nll + eps * smooth, nll


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, eps: float, ignore_index: int = PAD_ID
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Sums over non-padding targets of the smoothed loss and of the plain NLL, and their count.

    logits (B, T, V) in any float dtype (the softmax is fp32), target (B, T).
    """
    loss, nll = smoothed_sums(logits, target, eps, ignore_index)
    return loss, nll, int((target != ignore_index).sum())
