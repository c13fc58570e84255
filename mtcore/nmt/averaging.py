"""Checkpoint averaging: the parameter-wise mean of the last few weight snapshots of a run.

Vaswani et al. (2017, §6.1) averaged the last 5 (base) or 20 (big) checkpoints; fairseq
(`scripts/average_checkpoints.py`) and Marian (`--exponential-smoothing`) offer the same. The
mean of nearby points on the optimisation path sits nearer the centre of the basin than any one
of them, which is worth most when the learning rate is still high, as at the end of a short run.
`fit` keeps the snapshots in memory (`train.average_last`, `train.average_every`) and keeps the
average only when it validates better than the last weights.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import torch


def mean_state(states: Iterable[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Parameter-wise mean in float64, cast back to each tensor's dtype; non-float tensors from the last state."""
    total: dict[str, torch.Tensor] = {}
    last: dict[str, torch.Tensor] = {}
    n = 0
    for state in states:
        n += 1
        for k, v in state.items():
            if v.is_floating_point():
                total[k] = total[k] + v.double() if k in total else v.double()
        last = state
    if not n:
        raise ValueError("no weights to average")
    return {k: (total[k] / n).to(v.dtype) if k in total else v for k, v in last.items()}


class WeightSnapshots:
    """The last `keep` copies of a model's weights taken every `every` steps, on the CPU."""

    def __init__(self, keep: int, every: int):
        self.keep, self.every = keep, every
        self.items: deque[tuple[int, dict[str, torch.Tensor]]] = deque(maxlen=max(keep, 1))

    @property
    def enabled(self) -> bool:
        return self.keep >= 2

    def maybe_take(self, model: torch.nn.Module, step: int, force: bool = False) -> None:
        if self.enabled and (force or step % self.every == 0) and (not self.items or self.items[-1][0] != step):
            self.items.append((step, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}))

    def ready(self) -> bool:
        return self.enabled and len(self.items) >= 2

    def steps(self) -> list[int]:
        return [step for step, _ in self.items]

    def mean(self) -> dict[str, torch.Tensor]:
        return mean_state(state for _, state in self.items)
