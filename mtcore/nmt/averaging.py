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
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch


def mean_state(states: Iterable[dict[str, torch.Tensor]],
               names: Sequence[str] | None = None) -> dict[str, torch.Tensor]:
    """Parameter-wise mean in float64, cast back to each tensor's dtype; non-float tensors from the last state.
    Every state must have the first one's keys and shapes (an error names the state, from `names`, and the key):
    a key missing from some was averaged over all of them, and a (1, d) tensor broadcast into a (k, d) one."""
    total: dict[str, torch.Tensor] = {}
    first: dict[str, torch.Tensor] = {}
    last: dict[str, torch.Tensor] = {}
    first_name, n = "", 0
    for n, state in enumerate(states, 1):
        name = names[n - 1] if names is not None else f"weights {n}"
        if n == 1:
            first, first_name = state, name
        _check_alike(state, name, first, first_name)
        for k, v in state.items():
            if v.is_floating_point():
                total[k] = total[k] + v.double() if k in total else v.double()
        last = state
    if not n:
        raise ValueError("no weights to average")
    return {k: (total[k] / n).to(v.dtype) if k in total else v for k, v in last.items()}


def _check_alike(state: dict[str, torch.Tensor], name: str, first: dict[str, torch.Tensor], first_name: str) -> None:
    """`state` has `first`'s keys, each of `first`'s shape."""
    if extra := sorted(set(state) - set(first)):
        raise ValueError(f"{name}: parameter `{extra[0]}` is not in {first_name} ({len(extra)} such); only weights "
                         "of one model can be averaged")
    if missing := sorted(set(first) - set(state)):
        raise ValueError(f"{name}: parameter `{missing[0]}` of {first_name} is missing ({len(missing)} such); only "
                         "weights of one model can be averaged")
    for k, v in state.items():
        if v.shape != first[k].shape:
            raise ValueError(f"{name}: parameter `{k}` has shape {tuple(v.shape)}, {tuple(first[k].shape)} in "
                             f"{first_name}; only weights of one model can be averaged")


def distinct_checkpoints(directories: Sequence[str | Path]) -> None:
    """Each checkpoint once (paths resolved): given twice, one would count double in the mean."""
    seen: dict[Path, str | Path] = {}
    for d in directories:
        if (resolved := Path(d).resolve()) in seen:
            raise ValueError(f"{d}: the same checkpoint as {seen[resolved]}, given twice; average each checkpoint once")
        seen[resolved] = d


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
        return mean_state((state for _, state in self.items), names=[f"the snapshot of step {s}" for s in self.steps()])
