"""The per-worker training loop: plain PyTorch, DDP-aware, usable without Ray.

The model is either architecture of `build_model` (`model_cfg.arch`: transformer | rnn);
both train with the same loss, optimiser and schedule (the Noam schedule's d_model is the
embedding size; an RNN usually wants a smaller `lr_scale`, see experiments/configs/rnn_small.yaml).

Loss: label-smoothed cross-entropy (§5.4, Szegedy et al. 2016) over non-padding
targets. Schedule: lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
(§5.3, Eq. 3). Optimiser: Adam(0.9, 0.98, eps 1e-9). Gradient clipping, gradient
accumulation, bf16 autocast where the hardware has bf16 (`mtcore.nmt.precision`).

Distributed: if `torch.distributed` is initialised (Ray Train does it), the model is
wrapped in DDP, each rank trains on its own disjoint share of token batches (the same
number per rank), validation is sharded and gathered, and every stop decision
(patience, time budget, step limit) is taken identically on all ranks.

`fit` calls back into the caller, which owns logging and checkpointing:
- `on_step(metrics)` every `log_every` steps, on every rank, with values reduced over ranks:
  train/loss (label-smoothed, per target token), train/nll, train/lr, train/tokens_per_s
  (source + target non-pad tokens per second, all ranks), train/grad_norm (before clipping),
  step, epoch;
- `on_validation(metrics, state)` after each validation, on every rank: dev/loss (per-token
  NLL without smoothing, comparable across label-smoothing values), dev/bleu, dev/chrf, step,
  epoch; `state` (TrainState) holds the model, optimizer, scheduler, counters and the
  sacreBLEU signatures and sample translations of that validation. With `train.average_last`
  the run ends with one more validation, of the mean of its last weight snapshots
  (mtcore/nmt/averaging.py); it is reported (metrics with `averaged`: the number of snapshots)
  and kept as the model only if it beats the last weights on `train.best_metric` (dev BLEU or dev loss).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from mtcore.nmt.averaging import WeightSnapshots
from mtcore.nmt.batching import BatchingError, TokenBatchSampler, collate, plan_batches
from mtcore.config import ConfigError, ModelConfig, TrainConfig
from mtcore.nmt.decoding import encode_sources, translate_ids
from mtcore.nmt.encoded import EncodedPairs
from mtcore.nmt.loss import label_smoothed_loss, smoothed_sums
from mtcore.nmt.metrics import bleu_tokenize, corpus_bleu, corpus_chrf, spread_over
from mtcore.nmt.model import Seq2Seq, build_model
from mtcore.nmt.precision import training_autocast, uses_bf16, validation_autocast
from mtcore.nmt.tokenizer import PAD_ID, Tokenizer, normalize

log = logging.getLogger(__name__)

Pairs = Sequence[tuple[str, str]]

ADAM_BETAS, ADAM_EPS = (0.9, 0.98), 1e-9  # §5.3


# --------------------------------------------------------------------------- loss and schedule


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """§5.3, Eq. 3: linear warm-up for `warmup` steps, then decay with 1/sqrt(step). Steps count from 1."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def make_optimizer(
    model: torch.nn.Module, train_cfg: TrainConfig, d_model: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """Adam(0.9, 0.98, 1e-9) with the Noam schedule; the scheduler's k-th update is step k + 1."""
    fused = next(model.parameters()).is_cuda
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=ADAM_BETAS, eps=ADAM_EPS, fused=fused or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: noam_lr(k + 1, d_model, train_cfg.warmup, train_cfg.lr_scale)
    )
    return optimizer, scheduler


# --------------------------------------------------------------------------- data


EMBEDDED_LANGS = ("en", "vi")  # column order of the embedded corpora (src English, tgt Vietnamese)


def corpus_languages(model_cfg: ModelConfig, declared: str = "") -> tuple[str, str]:
    """The languages of a corpus's src and tgt columns: `declared` ("de-en"), else en-vi for an en/vi model
    (the embedded corpora, whichever way the model translates), else the model's own direction."""
    if declared:  # as --langs writes them: en-zh_CN is ("en", "zh_cn")
        src, _, tgt = declared.lower().partition("-")
        return src, tgt
    if {model_cfg.src_lang, model_cfg.tgt_lang} == set(EMBEDDED_LANGS):
        return EMBEDDED_LANGS
    return model_cfg.src_lang, model_cfg.tgt_lang


def oriented_pairs(table, model_cfg: ModelConfig, corpus_langs: tuple[str, str] | None = None) -> list[tuple[str, str]]:
    """(src, tgt) text pairs from a corpus table whose columns are `corpus_langs` (default:
    `corpus_languages(model_cfg)`), swapped when the model translates the other way."""
    corpus_langs = tuple(corpus_langs or corpus_languages(model_cfg))
    src, tgt = table.column("src").to_pylist(), table.column("tgt").to_pylist()
    model = (model_cfg.src_lang.lower(), model_cfg.tgt_lang.lower())
    corpus_langs = tuple(lang.lower() for lang in corpus_langs)
    if model == corpus_langs[::-1]:
        src, tgt = tgt, src
    elif model != corpus_langs:
        raise ConfigError(f"model direction {model_cfg.direction} does not match the corpus languages "
                          f"{'-'.join(corpus_langs)}; set job.corpus_langs or model.src_lang/tgt_lang")
    return list(zip(src, tgt))


def encode_pairs(tokenizer: Tokenizer, pairs: Pairs, max_len: int) -> tuple[list[tuple[list[int], list[int]]], int]:
    """Token ids (no BOS/EOS) of the pairs whose sides fit `max_len` tokens with BOS/EOS; and how many did not."""
    kept, skipped = encode_pairs_counted(tokenizer, pairs, max_len)
    return kept, sum(skipped.values())


def encode_pairs_counted(tokenizer: Tokenizer, pairs: Pairs, max_len: int) -> tuple[list[tuple[list[int], list[int]]], dict[str, int]]:
    """As `encode_pairs`, with the pairs left out counted by why: an empty side, or a side over max_len."""
    src = tokenizer.encode([s for s, _ in pairs])
    tgt = tokenizer.encode([t for _, t in pairs])
    kept, empty, long = [], 0, 0
    for s, t in zip(src, tgt):
        if not s or not t:
            empty += 1
        elif len(s) >= max_len or len(t) >= max_len:
            long += 1
        else:
            kept.append((s, t))
    return kept, {"empty": empty, "too_long": long}


def select_fitting(pairs: EncodedPairs, max_len: int) -> tuple[EncodedPairs, dict[str, int]]:
    """`encode_pairs_counted` for pairs encoded already: those that fit, and how many did not and why."""
    src, tgt = pairs.lengths()
    empty = (src == 0) | (tgt == 0)
    long = ~empty & ((src >= max_len) | (tgt >= max_len))
    return pairs.select(np.flatnonzero(~empty & ~long)), {"empty": int(empty.sum()), "too_long": int(long.sum())}


def _lengths(encoded) -> tuple[Sequence[int], Sequence[int]]:
    if isinstance(encoded, EncodedPairs):
        src, tgt = encoded.lengths()
        return src + 1, tgt + 1
    return [len(s) + 1 for s, _ in encoded], [len(t) + 1 for _, t in encoded]


# --------------------------------------------------------------------------- distributed helpers


def dist_info() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _all_sum(values: list[float], device: torch.device) -> list[float]:
    if dist_info()[1] == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def _every_rank(flag: bool, device: torch.device) -> bool:
    return _all_sum([float(flag)], device)[0] == dist_info()[1]


class ResumeMismatch(RuntimeError):
    """Ranks resumed from different checkpoints. Not a user error: a retry (a checkpoint copied by then) may cure it."""


def _check_same_resume_point(ts: TrainState, device: torch.device) -> None:
    """Every rank resumed at the same step, epoch and batch: each reads the checkpoint on its own node, and one that
    fell back to an older checkpoint (a damaged or half-copied latest one) would run other collectives and hang."""
    if dist_info()[1] == 1:
        return
    here = [float(ts.step), float(ts.epoch), float(ts.groups_done)]
    t = torch.tensor(here + [-v for v in here], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the max of each value and of its negation: equal only if all agree
    if any(hi != -lo for hi, lo in zip(t[:3].tolist(), t[3:].tolist())):
        raise ResumeMismatch(f"the ranks resumed from different checkpoints (this rank: step {ts.step}, epoch "
                             f"{ts.epoch}); a rank's latest checkpoint is damaged or not yet copied to its node: "
                             "check the run's storage, which every node must see alike")


def update_seed(seed: int, rank: int, step: int) -> int:
    """A distinct 63-bit seed per (seed, rank, update)."""
    return ((seed * 1_000_003 + rank) * 1_000_000_007 + step) % (2**63 - 1)


def accumulate_gradients(net: torch.nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                         label_smoothing: float, autocast, device: torch.device,
                         counts: Sequence[tuple[int, int]] | None = None) -> dict[str, Any]:
    """Backward one update's batches (collated src, tgt_in, tgt_out); their loss, NLL and token sums.

    The update's loss is the mean over every target token of its batches on every rank (fairseq; Marian's
    ce-mean-words): each rank scales its sum by world / all ranks' target tokens, and DDP's mean over
    ranks divides the world out. A mean per batch weighed a token of a small batch (long sentences, a
    rank's half of a split batch) up to 3.5x one of a full batch.

    `counts`: each batch's (source, target) non-padding tokens, counted on the host (`batch_counts`); without
    them they are read back from the device. The loss and NLL sums come back as device tensors, read when the
    window is reported: on a GPU, no value is waited for within a step, so the host queues the next one.
    """
    world = dist_info()[1]
    if counts is None:
        counts = [(int((b[0] != PAD_ID).sum()), int((b[2] != PAD_ID).sum())) for b in batches]
    group_tgt = _all_sum([float(sum(tgt for _, tgt in counts))], device)[0]
    scale = world / max(group_tgt, 1.0)
    sums: dict[str, Any] = {"loss": 0.0, "nll": 0.0, "tgt": 0, "tokens": 0}
    for j, ((src, tgt_in, tgt_out), (n_src, n_tgt)) in enumerate(zip(batches, counts)):
        sync = j == len(batches) - 1 or world == 1  # DDP all-reduces once, on the last batch's backward
        with (contextlib.nullcontext() if sync else net.no_sync()), autocast:
            logits = net(src, tgt_in)  # (B, T, V)
        loss, nll = smoothed_sums(logits, tgt_out, label_smoothing)
        (loss * scale).backward()
        sums["loss"] += loss.detach()
        sums["nll"] += nll.detach()
        sums["tgt"] += n_tgt
        sums["tokens"] += n_src + n_tgt
    return sums


def batch_counts(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> tuple[int, int]:
    """Non-padding (source, target) tokens of a batch as `collate` builds it: each side gets one EOS or BOS."""
    return sum(len(s) + 1 for s, _ in pairs), sum(len(t) + 1 for _, t in pairs)


# --------------------------------------------------------------------------- state and result


@dataclass
class TrainState:
    """What a checkpoint needs to resume: `fit(..., state=ts.to_dict())`, or through a checkpoint
    directory: `save_checkpoint(dir, ts.model, tok, train_state=ts.to_dict(include_model=False))`
    then `fit(..., state=load_train_state(dir))`."""

    model: Seq2Seq
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    step: int = 0  # optimiser updates done
    epoch: int = 0  # epochs completed
    groups_done: int = 0  # optimiser updates done within the current epoch
    best_bleu: float = -1.0
    best_loss: float = math.inf
    bad_validations: int = 0  # validations since the best `train.best_metric`
    last_validation: dict[str, Any] = field(default_factory=dict)  # signatures, samples
    train_seconds: float = 0.0  # wall time trained so far, over every resume: the time budget counts it

    def to_dict(self, include_model: bool = True) -> dict[str, Any]:
        d = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "groups_done": self.groups_done,
            "best_bleu": self.best_bleu,
            "best_loss": self.best_loss,
            "bad_validations": self.bad_validations,
            "train_seconds": self.train_seconds,
        }
        if include_model:
            d["model"] = self.model.state_dict()
        return d

    def load(self, d: dict[str, Any]) -> None:
        from mtcore.nmt.checkpoint import load_weights

        if "model" in d:
            load_weights(self.model, d["model"], "resume state")
        self.optimizer.load_state_dict(d["optimizer"])
        self.scheduler.load_state_dict(d["scheduler"])
        for key in ("step", "epoch", "groups_done", "best_bleu", "bad_validations"):
            setattr(self, key, d[key])
        self.best_loss = d.get("best_loss", math.inf)  # absent in checkpoints written before best_metric
        self.train_seconds = d.get("train_seconds", 0.0)  # absent before resumes counted the budget

    def best(self) -> dict[str, float]:
        return {"dev/bleu": self.best_bleu, "dev/loss": self.best_loss}

    def record(self, metrics: dict[str, float]) -> None:
        self.best_bleu = max(self.best_bleu, metrics["dev/bleu"])
        self.best_loss = min(self.best_loss, metrics["dev/loss"])


@dataclass
class TrainResult:
    model: Seq2Seq
    state: TrainState
    stop_reason: str  # max_steps | max_epochs | patience | time_budget | callback (on_update said stop)
    steps: int
    elapsed_s: float
    tokens_per_s: float  # source + target non-pad tokens per second over the run, all ranks
    best_bleu: float
    last_metrics: dict[str, float]  # the last validation
    skipped_pairs: int  # training pairs over max_len or with an empty side
    averaged: dict[str, Any] = field(default_factory=dict)  # train.average_last: snapshot steps, dev BLEU/loss, kept


# --------------------------------------------------------------------------- validation


@torch.inference_mode()
def dev_loss(model: Seq2Seq, encoded, max_tokens: int, device: torch.device, autocast) -> tuple[float, float]:
    """(sum of per-token NLL, target tokens) over this rank's share of `encoded`."""
    if not encoded:
        return 0.0, 0.0
    model.eval()
    src_lens, tgt_lens = _lengths(encoded)
    lengths = torch.tensor([max(a, b) for a, b in zip(src_lens, tgt_lens)]).numpy()
    total, count = 0.0, 0
    for idx in plan_batches(lengths, max_tokens, None):
        src, tgt_in, tgt_out = collate([encoded[i] for i in idx], device)
        with autocast:
            logits = model(src, tgt_in)
        _, nll, n = label_smoothed_loss(logits, tgt_out, 0.0)
        total, count = total + nll.item(), count + n
    return total, float(count)


def validate(
    model: Seq2Seq,
    tokenizer: Tokenizer,
    dev_encoded,
    dev_pairs: Pairs,
    train_cfg: TrainConfig,
    device: torch.device,
    autocast=contextlib.nullcontext(),
) -> tuple[dict[str, float], dict[str, Any]]:
    """dev/loss over all dev pairs; dev/bleu and dev/chrf on `dev_limit` pairs spread over the set (`evenly_spaced`)
    (greedy or beam per `train_cfg.beam`). Sharded over ranks, identical result on each."""
    rank, world = dist_info()
    was_training = model.training
    nll, count = dev_loss(model, dev_encoded[rank::world], train_cfg.max_tokens, device, autocast)
    nll, count = _all_sum([nll, count], device)
    subset = spread_over(dev_pairs, train_cfg.dev_limit)
    mine = list(range(rank, len(subset), world))
    sources = encode_sources(tokenizer, [subset[i][0] for i in mine], max_len=model.cfg.max_positions - 1)
    with autocast:
        hyp_ids = translate_ids(model, sources, train_cfg.validation_decode())
    # a blank source's hypothesis is blank, as the test decode and `mtcore.evaluate` score it
    hyps_mine = [(i, hyp if normalize(subset[i][0]) else "") for i, hyp in zip(mine, tokenizer.decode(hyp_ids))]
    if world > 1:
        gathered: list = [None] * world
        dist.all_gather_object(gathered, hyps_mine)
        hyps_mine = [h for part in gathered for h in part]
    hyps = [h for _, h in sorted(hyps_mine)]
    refs = [t for _, t in subset]
    bleu, chrf = corpus_bleu(hyps, refs, tokenize=bleu_tokenize(model.cfg.tgt_lang)), corpus_chrf(hyps, refs)
    model.train(was_training)
    metrics = {"dev/loss": nll / max(count, 1.0), "dev/bleu": bleu.score, "dev/chrf": chrf.score}
    extras = {
        "bleu_signature": bleu.signature,
        "chrf_signature": chrf.signature,
        "samples": [{"src": s, "hyp": h, "ref": r} for (s, r), h in list(zip(subset, hyps))[:5]],
    }
    return metrics, extras


# --------------------------------------------------------------------------- the loop


def fit(
    train_cfg: TrainConfig,
    model_cfg: ModelConfig,
    train_pairs: Pairs,
    dev_pairs: Pairs,
    tokenizer: Tokenizer,
    *,
    device: str | torch.device = "cpu",
    on_step: Callable[[dict[str, float]], None] | None = None,
    on_validation: Callable[[dict[str, float], TrainState], None] | None = None,
    on_epoch: Callable[[int, list[list[int]]], None] | None = None,
    on_update: Callable[[TrainState, float], bool | None] | None = None,
    state: dict[str, Any] | None = None,
    time_budget_s: float | None = None,
) -> TrainResult:
    """Train until max_steps, max_epochs, patience on `best_metric` or the time budget; see the module doc.

    `train_pairs`/`dev_pairs` are (source, target) texts in the model's direction (`train_pairs` may be
    `EncodedPairs`, the corpus encoded once on disk)
    (`oriented_pairs` swaps corpus columns). `state` is `TrainState.to_dict()` of an earlier
    run (weights included) to resume from. `time_budget_s` overrides `train_cfg.time_budget_min`.
    `on_epoch(epoch, batches)` sees this rank's batches (indices into the encoded training pairs)
    before each epoch: the record of its share. `on_update(state, elapsed_s)` runs after every
    optimiser step (snapshots by wall time, e.g. for budget curves); returning True stops training.
    """
    device = torch.device(device)
    rank, world = dist_info()
    t_start = time.perf_counter()
    budget = time_budget_s if time_budget_s is not None else train_cfg.time_budget_min * 60.0
    if not dev_pairs:  # every validation (and the checkpoint choice) would score nothing, after all the training
        raise BatchingError("no dev pairs: training validates on them; give a dev set of at least one pair")
    # Sides longer than the position table would fail mid-training, at the first batch holding one: skip them as
    # sides over train.max_len are (a job checks max_positions against max_len before it starts; `fit` called
    # directly, e.g. from a notebook, did not).
    train_max = min(train_cfg.max_len, model_cfg.max_positions)
    train_bound = "max_len" if train_cfg.max_len <= model_cfg.max_positions else "model.max_positions"
    if isinstance(train_pairs, EncodedPairs):  # encoded once by the driver, memory-mapped (mtcore.nmt.encoded)
        train, why = select_fitting(train_pairs, train_max)
    else:
        train, why = encode_pairs_counted(tokenizer, train_pairs, train_max)
    skipped = sum(why.values())
    if not train:
        key = f"{'train.' * (train_bound == 'max_len')}{train_bound}"  # first: a search's trial table cuts errors short
        raise BatchingError(f"`{key}` ({train_max} pieces a side) fits none of the {len(train_pairs):,} training pairs "
                            f"(both sides non-empty); raise it or check the corpus")
    if skipped and rank == 0:
        reasons = [f"{why['too_long']} longer than {train_bound}={train_max}"] * bool(why["too_long"]) + [
            f"{why['empty']} with an empty side"] * bool(why["empty"])
        log.warning("skipped %s of %s training pairs: %s", f"{skipped:,}", f"{len(train_pairs):,}", ", ".join(reasons))
    dev_max = min(train_cfg.max_len, model_cfg.max_positions - 1)
    bound = "train.max_len" if train_cfg.max_len <= model_cfg.max_positions - 1 else "model.max_positions"
    dev, dev_skipped = encode_pairs_counted(tokenizer, dev_pairs, dev_max)
    if not dev:  # a dev loss of no pair read 0.0: the "best" checkpoint, and patience ran on it
        raise BatchingError(f"none of the {len(dev_pairs):,} dev pairs fits `{bound}` ({dev_max} pieces a side, both "
                            f"sides non-empty), so dev loss would score nothing; raise {bound} or check the dev set")
    if sum(dev_skipped.values()) and rank == 0:  # dev BLEU decodes them all; dev loss cannot score what does not fit
        log.warning("dev loss leaves out %d of %s dev pairs (%d longer than max_len=%d, %d with an empty side); dev BLEU "
                    "scores them all", sum(dev_skipped.values()), f"{len(dev_pairs):,}", dev_skipped["too_long"], dev_max,
                    dev_skipped["empty"])

    torch.manual_seed(train_cfg.seed)  # identical initial weights on every rank
    model = build_model(model_cfg, vocab_size=tokenizer.vocab_size).to(device)
    optimizer, scheduler = make_optimizer(model, train_cfg, model.cfg.d_model)
    ts = TrainState(model, optimizer, scheduler)
    if state is not None:
        ts.load(state)
        _check_same_resume_point(ts, device)
    spent_before = ts.train_seconds  # a resumed run gets what is left of its budget, not a new one
    resumed_at = ts.step if state is not None else None
    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        device_ids = None
        if device.type == "cuda":
            device_ids = [device.index if device.index is not None else torch.cuda.current_device()]
        # No buffer needs syncing (no batch norm; the position table is the same on every rank): without
        # broadcast_buffers, DDP does not send the table before every forward.
        net = DistributedDataParallel(model, device_ids=device_ids, broadcast_buffers=False)
    if train_cfg.compile:
        # Training's forward and backward only; validation and decoding run the plain model (their shapes change
        # every step). Token batches vary in shape: after the second shape, Dynamo compiles a dynamic-shape graph.
        net = torch.compile(net)
    want_bf16 = _every_rank(uses_bf16(device.type, train_cfg.bf16), device)  # one precision for all (nodes may differ)
    autocast = training_autocast(device, want_bf16)
    eval_autocast = validation_autocast(device, want_bf16)
    src_lens, tgt_lens = _lengths(train)
    sampler = TokenBatchSampler(src_lens, tgt_lens, train_cfg.max_tokens, seed=train_cfg.seed, rank=rank, world_size=world)
    acc = train_cfg.accumulation
    clip = train_cfg.clip_norm if train_cfg.clip_norm > 0 else math.inf

    last_metrics: dict[str, float] = {}
    last_validated = ts.step if state is not None else -1
    snapshots = WeightSnapshots(train_cfg.average_last, train_cfg.average_every)
    averaged: dict[str, Any] = {}
    total_tokens = 0
    window = {"loss": 0.0, "nll": 0.0, "tgt": 0, "tokens": 0, "grad_norm": 0.0, "steps": 0, "lr": 0.0, "t": time.perf_counter()}

    def run_validation() -> bool:
        """Validate, call back, update patience; True if patience says stop."""
        nonlocal last_metrics, last_validated
        metrics, extras = validate(model, tokenizer, dev, dev_pairs, train_cfg, device, eval_autocast)
        last_validated = ts.step
        ts.bad_validations = 0 if train_cfg.is_better(metrics, ts.best()) else ts.bad_validations + 1
        ts.record(metrics)
        ts.last_validation = extras
        last_metrics = {**metrics, "step": ts.step, "epoch": ts.epoch}
        if on_validation is not None:
            on_validation(dict(last_metrics), ts)
        return bool(train_cfg.patience) and ts.bad_validations >= train_cfg.patience

    def validate_average() -> None:
        """Validate the mean of the last snapshots (the final weights among them); keep it if it beats them."""
        nonlocal last_metrics
        snapshots.maybe_take(model, ts.step, force=True)
        if snapshots.enabled and len(snapshots.items) < snapshots.keep and rank == 0:
            what = "skipped" if not snapshots.ready() else f"{len(snapshots.items)} snapshots"
            if resumed_at is not None:
                # snapshots live in memory: those taken before the resume are gone (saving them would multiply every
                # checkpoint's size by the average's length)
                log.warning("averaging %s: the run resumed at step %d, and only %d of the last %d snapshots were taken "
                            "since", what, resumed_at, len(snapshots.items), snapshots.keep)
            else:  # a run shorter than average_last x average_every steps: it was silently averaged less, or not at all
                log.warning("averaging %s: the run ended at step %d, which holds %d of the last %d snapshots taken every "
                            "%d steps (train.average_every)", what, ts.step, len(snapshots.items), snapshots.keep,
                            train_cfg.average_every)
        if not snapshots.ready() or not last_metrics:  # no validation since a resume: nothing to compare with
            return
        final_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(snapshots.mean())
        metrics, extras = validate(model, tokenizer, dev, dev_pairs, train_cfg, device, eval_autocast)
        averaged.update(steps=snapshots.steps(), dev_bleu=metrics["dev/bleu"], last_dev_bleu=last_metrics["dev/bleu"],
                        dev_loss=metrics["dev/loss"], last_dev_loss=last_metrics["dev/loss"],
                        kept=train_cfg.is_better(metrics, last_metrics))
        if not averaged["kept"]:
            model.load_state_dict(final_weights)
            return
        ts.record(metrics)
        ts.last_validation = extras
        last_metrics = {**metrics, "step": ts.step, "epoch": ts.epoch, "averaged": float(len(averaged["steps"]))}
        if on_validation is not None:
            on_validation(dict(last_metrics), ts)

    # A resumed run may already be at its step limit, out of time or out of patience (a run that stopped on
    # patience and failed after it, e.g. in its test decoding): train no further step.
    stop_reason = "max_steps" if train_cfg.max_steps and ts.step >= train_cfg.max_steps else ""
    if not stop_reason and train_cfg.patience and ts.bad_validations >= train_cfg.patience:
        stop_reason = "patience"
    if not stop_reason and budget and spent_before >= budget:
        stop_reason = "time_budget"
    while not stop_reason:
        if ts.epoch >= train_cfg.max_epochs:
            stop_reason = "max_epochs"
            break
        sampler.set_epoch(ts.epoch)
        batches = list(sampler)
        if on_epoch is not None:
            on_epoch(ts.epoch, batches)
        groups = [batches[i : i + acc] for i in range(0, len(batches), acc)]
        for group in groups[ts.groups_done :]:
            net.train()
            # Dropout's stream from (seed, rank, update): per rank, and the same after a resume (a stream seeded
            # once would have advanced by then), with no RNG state to save.
            torch.manual_seed(update_seed(train_cfg.seed, rank, ts.step))
            group_pairs = [[train[i] for i in idx] for idx in group]
            sums = accumulate_gradients(net, [collate(pairs, device) for pairs in group_pairs],
                                        train_cfg.label_smoothing, autocast, device,
                                        counts=[batch_counts(pairs) for pairs in group_pairs])
            for key in ("loss", "nll", "tgt", "tokens"):
                window[key] += sums[key]
            total_tokens += sums["tokens"]
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            window["lr"] = optimizer.param_groups[0]["lr"]  # the rate this update used
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            ts.step += 1
            ts.groups_done += 1
            ts.train_seconds = spent_before + time.perf_counter() - t_start
            window["grad_norm"] += grad_norm.detach()  # a device tensor: read at the report, not every step
            window["steps"] += 1
            snapshots.maybe_take(model, ts.step)
            # the callback judges this rank's clock: every rank stops if any says so (as for the time budget)
            stop_asked = on_update is not None and bool(on_update(ts, time.perf_counter() - t_start))

            if ts.step % train_cfg.log_every == 0:
                _report_window(window, ts, device, on_step)
            if train_cfg.validate_every and ts.step % train_cfg.validate_every == 0:
                if run_validation():
                    stop_reason = "patience"
            if not stop_reason and train_cfg.max_steps and ts.step >= train_cfg.max_steps:
                stop_reason = "max_steps"
            if not stop_reason and (on_update is not None or budget or world > 1):  # every rank reduces, always
                asked, over = _all_sum([float(stop_asked), float(bool(budget) and ts.train_seconds >= budget)], device)
                stop_reason = "callback" if asked else "time_budget" if over else ""
            if stop_reason:
                break
        else:
            ts.epoch += 1
            ts.groups_done = 0
            if not train_cfg.validate_every and run_validation():
                stop_reason = "patience"
    if last_validated != ts.step:
        run_validation()
    validate_average()
    elapsed = time.perf_counter() - t_start
    (total_tokens_all,) = _all_sum([float(total_tokens)], device)
    return TrainResult(
        model=model,
        state=ts,
        stop_reason=stop_reason,
        steps=ts.step,
        elapsed_s=elapsed,
        tokens_per_s=total_tokens_all / max(elapsed, 1e-9),
        best_bleu=ts.best_bleu,
        last_metrics=last_metrics,
        skipped_pairs=skipped,
        averaged=averaged,
    )


def _report_window(window: dict, ts: TrainState, device, on_step) -> None:
    loss, nll, tgt, tokens = _all_sum([float(window["loss"]), float(window["nll"]), float(window["tgt"]),
                                       float(window["tokens"])], device)
    now = time.perf_counter()
    metrics = {
        "train/loss": loss / max(tgt, 1.0),
        "train/nll": nll / max(tgt, 1.0),
        "train/lr": window["lr"],
        "train/tokens_per_s": tokens / max(now - window["t"], 1e-9),
        "train/grad_norm": float(window["grad_norm"]) / max(window["steps"], 1),
        "step": ts.step,
        "epoch": ts.epoch,
    }
    window.update(loss=0.0, nll=0.0, tgt=0, tokens=0, grad_norm=0.0, steps=0, t=now)
    if on_step is not None:
        on_step(metrics)


# --------------------------------------------------------------------------- a toy corpus


_TOY_NOUNS = [
    ("cat", "con mèo"), ("dog", "con chó"), ("house", "ngôi nhà"), ("book", "quyển sách"), ("file", "tệp"),
    ("window", "cửa sổ"), ("student", "học sinh"), ("teacher", "giáo viên"), ("car", "xe hơi"), ("tree", "cái cây"),
    ("folder", "thư mục"), ("menu", "trình đơn"),
]
_TOY_ADJS = [("big", "lớn"), ("small", "nhỏ"), ("red", "đỏ"), ("new", "mới"), ("old", "cũ"), ("beautiful", "đẹp")]
_TOY_TEMPLATES = [
    ("the {a} {n} is here", "{n} {a} ở đây"),
    ("open the {a} {n}", "mở {n} {a}"),
    ("the {n} is not {a}", "{n} không {a}"),
    ("i see a {a} {n}", "tôi thấy {n} {a}"),
    ("where is the {a} {n}?", "{n} {a} ở đâu?"),
]


def toy_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """`n` distinct English-Vietnamese pairs from templates: for tests, examples and smoke
    benchmarks where no real corpus is at hand (at most 360 exist)."""
    import random

    combos = [(t, a, b) for t in _TOY_TEMPLATES for a in _TOY_ADJS for b in _TOY_NOUNS]
    if n > len(combos):
        raise ValueError(f"only {len(combos)} toy pairs exist, asked for {n}")
    random.Random(seed).shuffle(combos)
    return [(en.format(a=a[0], n=b[0]), vi.format(a=a[1], n=b[1])) for (en, vi), a, b in combos[:n]]
