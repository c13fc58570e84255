"""mtcore's default job vs Hugging Face's MarianMTModel trained from scratch on the same budget (issue 17).

    python benchmarks/budget_bleu.py                          # the default job's budget (11 minutes) for each
    python benchmarks/budget_bleu.py --minutes 1 --test-limit 50   # a quick look
    python benchmarks/budget_bleu.py --anchor-only --anchor-bf16   # the anchor alone, under bf16 autocast as mtcore
    python benchmarks/budget_bleu.py --anchor-bf16 --anchor-recipe hf   # Marian as HF's Seq2SeqTrainer trains it

Figure: `experiments/train_transformer.py` as a new user runs it (the default job: `preset: auto`,
2 Ray Train CPU workers, validation picks the best checkpoint), tested with beam 5.
Anchor: `transformers.MarianMTModel` built from scratch with the same shape as the default job's
model (mtcore's own Marian export config: layers, d_model, heads, FFN, tied embeddings, dropout: the
same parameter count), the same SentencePiece vocabulary, the same cleaned training pairs and token
batches (both ranks' batches of a step), the same label-smoothed loss, Adam and Noam schedule, trained
for the same wall-clock minutes in one process with every core as a torch thread (how a user runs
HF on a CPU box), then decoded with beam 5 through `generate`. Both are scored with sacreBLEU on the
same test pairs. Goal: mtcore >= 1.5x the anchor's test BLEU and >= 2x its training tokens/s.

`--anchor-recipe hf` trains the same model the way `transformers`' own translation example
(`run_translation.py`, `Seq2SeqTrainer`) does when a user changes nothing but the learning rate and
the batch size: AdamW (0.9, 0.999, 1e-8, no weight decay), a linear decay over 3 epochs and no
warm-up, batches of sentences (not of tokens) drawn by its `group_by_length` sampler (a user who sets
the batch size turns it on: shuffled batches pad to their longest sentence), cross-entropy without
label smoothing, gradients clipped at 1.0. The batch is 64 sentences (`--anchor-batch`; 0: as many as
mtcore's steps hold on average, 256 on the embedded corpus): in 2-minute probes 32 and 64 reached the
same loss (6.26, 6.25) and 256 did not (7.5, its batches of long messages take seconds each). Each of
`--anchor-lr` is trained (the first, 5e-5, is HF's default) and the best test BLEU of them is the
anchor. This separates what mtcore's recipe (token batches, Noam warm-up, label smoothing) is worth
from what its implementation is.
Needs transformers (the `bench` extra). Runs in its own MLflow store; the cleaned corpus and the
tokenizer of the workspace are reused.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


HF_EPOCHS = 3  # TrainingArguments.num_train_epochs: the linear decay's length
HF_BETAS, HF_EPS, HF_CLIP = (0.9, 0.999), 1e-8, 1.0  # TrainingArguments' AdamW and max_grad_norm defaults


def train_marian(job, train_data: str, spm_model: str, minutes: float, workers: int, log=print, bf16: bool = False,
                 recipe: str = "mtcore", lr: float = 5e-5, batch: int = 0):
    """The anchor: a MarianMTModel trained on one process, with mtcore's recipe or HF's (`recipe`, `lr`: see the
    module's docstring). Returns (model, steps, tokens/s, tokenizer). `bf16`: its forward under the CPU's bf16
    autocast, as mtcore's `train.bf16` (a choice an HF user makes: `TrainingArguments(bf16=True)`)."""
    import torch
    from transformers import MarianMTModel, get_linear_schedule_with_warmup

    from mtcore.distributed.ray_training import load_pairs
    from mtcore.nmt.batching import TokenBatchSampler, collate
    from mtcore.nmt.export import marian_config
    from mtcore.nmt.loss import label_smoothed_loss
    from mtcore.nmt.model import build_model
    from mtcore.nmt.tokenizer import PAD_ID, Tokenizer
    from mtcore.nmt.training import encode_pairs, make_optimizer

    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(job.run.train.seed)
    tok = Tokenizer(spm_model)
    model_cfg, train_cfg = job.run.model, job.run.train
    shape = build_model(model_cfg, vocab_size=tok.vocab_size)
    cfg = marian_config(shape, model_cfg.max_positions - 1)
    cfg.dropout, cfg.attention_dropout = model_cfg.dropout, model_cfg.attention_dropout  # training, not the export's 0
    model = MarianMTModel(cfg)
    ours = sum(p.numel() for p in shape.parameters())
    theirs = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log(f"anchor: MarianMTModel {theirs / 1e6:.2f}M trainable parameters (mtcore's model: {ours / 1e6:.2f}M)")
    del shape
    train, _ = encode_pairs(tok, load_pairs(train_data, job, job.job.train_limit), train_cfg.max_len)
    src_lens = [len(s) + 1 for s, _ in train]
    tgt_lens = [len(t) + 1 for _, t in train]
    sampler = TokenBatchSampler(src_lens, tgt_lens, train_cfg.max_tokens, seed=train_cfg.seed)
    per_step = workers * train_cfg.accumulation  # mtcore's step: each rank's batch (× accumulation)
    if recipe == "hf":
        sampler.set_epoch(0)
        sentences = batch or round(len(train) * per_step / max(len(list(sampler)), 1))  # or mtcore's mean a step
        sampler = GroupedSentenceBatches(src_lens, sentences, seed=train_cfg.seed)
        per_step = 1
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=HF_BETAS, eps=HF_EPS, weight_decay=0.0)
        scheduler = get_linear_schedule_with_warmup(optimizer, 0, HF_EPOCHS * len(sampler))
        clip = HF_CLIP
        log(f"anchor: HF's recipe, AdamW lr {lr:g}, linear decay over {HF_EPOCHS} epochs "
            f"({HF_EPOCHS * len(sampler):,} steps), {sentences} sentences a batch, no label smoothing")
    else:
        optimizer, scheduler = make_optimizer(model, train_cfg, model_cfg.d_model)
        clip = train_cfg.clip_norm if train_cfg.clip_norm > 0 else math.inf
    budget, t0, steps, tokens, epoch = minutes * 60, time.perf_counter(), 0, 0, 0
    last_log = t0
    model.train()
    while time.perf_counter() - t0 < budget:
        sampler.set_epoch(epoch)
        batches = list(sampler)
        for i in range(0, len(batches) - per_step + 1, per_step):
            group = batches[i:i + per_step]
            for idx in group:
                src, tgt_in, tgt_out = collate([train[j] for j in idx])
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    logits = model(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=tgt_in,
                                   decoder_attention_mask=tgt_in != PAD_ID).logits
                if recipe == "hf":  # MarianMTModel's own loss: the mean cross-entropy of the batch's tokens
                    n_tgt = int((tgt_out != PAD_ID).sum())
                    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(),
                                                             ignore_index=PAD_ID, reduction="sum")
                else:
                    loss, _, n_tgt = label_smoothed_loss(logits, tgt_out, train_cfg.label_smoothing)
                (loss / max(n_tgt, 1) / len(group)).backward()
                tokens += int((src != PAD_ID).sum()) + n_tgt
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
            now = time.perf_counter()
            if now - last_log >= 30:
                log(f"anchor: step {steps:>6}  loss {loss.item() / max(n_tgt, 1):.3f}  "
                    f"{tokens / (now - t0):,.0f} tok/s  {(now - t0) / 60:.1f}/{minutes:g} min")
                last_log = now
            if now - t0 >= budget:
                break
        epoch += 1
    elapsed = time.perf_counter() - t0
    return model.eval(), steps, tokens / elapsed, tok


class GroupedSentenceBatches:
    """Batches of `size` sentences drawn by HF's `LengthGroupedSampler` (`group_by_length=True`): a new random
    order each epoch, sorted by source length inside megabatches of 50 batches, so that a batch pads little."""

    def __init__(self, src_lens: list[int], size: int, seed: int):
        self.src_lens, self.size, self.seed, self.epoch = src_lens, max(size, 1), seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return -(-len(self.src_lens) // self.size)

    def __iter__(self):
        import torch
        from transformers.trainer_pt_utils import LengthGroupedSampler

        order = list(LengthGroupedSampler(self.size, lengths=self.src_lens,
                                          generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)))
        return (order[i:i + self.size] for i in range(0, len(order), self.size))


def decode_marian(model, tok, sources: list[str], beam: int, batch_size: int = 32) -> tuple[list[str], float]:
    """Beam search through `generate`, length-sorted batches; (translations in input order, sentences/s)."""
    import torch

    from mtcore.config import DecodeConfig
    from mtcore.nmt.decoding import encode_sources
    from mtcore.nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID

    limits = DecodeConfig()
    ids = encode_sources(tok, sources, max_len=model.config.max_position_embeddings - 1)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[list[int]] = [[] for _ in ids]
    t0 = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            src = torch.full((len(idx), max(len(ids[i]) for i in idx)), PAD_ID)
            for row, i in enumerate(idx):
                src[row, :len(ids[i])] = torch.tensor(ids[i])
            limit = int(limits.max_len_a * src.size(1) + limits.max_len_b)
            gen = model.generate(input_ids=src, attention_mask=src != PAD_ID, num_beams=beam, do_sample=False,
                                 max_new_tokens=limit, max_length=None, decoder_start_token_id=BOS_ID,
                                 eos_token_id=EOS_ID, pad_token_id=PAD_ID, bad_words_ids=[[PAD_ID], [BOS_ID]])
            for row, i in enumerate(idx):
                out[i] = [t for t in gen[row].tolist()[1:] if t not in (PAD_ID, EOS_ID)]
    return tok.decode(out), len(sources) / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, help="training budget of each (default: the default job's)")
    ap.add_argument("--test-limit", type=int, default=0, help="N test pairs spread over the set (default: the default job's)")
    ap.add_argument("--anchor-bf16", action="store_true", help="train the anchor under the CPU's bf16 autocast too")
    ap.add_argument("--anchor-only", action="store_true", help="train and test only the anchor (mtcore's figures: an earlier run)")
    ap.add_argument("--anchor-recipe", choices=("mtcore", "hf"), default="mtcore",
                    help="train the anchor with mtcore's recipe (default) or as HF's Seq2SeqTrainer does")
    ap.add_argument("--anchor-batch", type=int, default=64,
                    help="with --anchor-recipe hf: sentences a batch (0: as many as mtcore's steps hold on average)")
    ap.add_argument("--anchor-lr", default="5e-5,3e-4,1e-3",
                    help="with --anchor-recipe hf: learning rates, one anchor each, the best one's BLEU counts")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("transformers") is None:
        sys.exit("budget_bleu.py needs transformers: pip install -e '.[bench]'")
    work = Path(tempfile.mkdtemp(prefix="budget_bleu-"))
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"

    from mtcore.console import configure
    from mtcore.distributed.cluster import init_ray
    from mtcore.distributed.jobs import DEFAULT_JOB, TrainingJob
    from mtcore.distributed.ray_training import load_pairs, resolve_train_data, run_training, tokenizer_for
    from mtcore.nmt.metrics import score_translations
    from mtcore.tracking.run import TrackedRun

    configure()
    init_ray()
    overrides = [f"job.run_name=bench-budget-{time.strftime('%Y%m%d-%H%M%S')}"]  # fresh, never resumed
    overrides += [f"train.time_budget_min={args.minutes}"] if args.minutes else []
    overrides += [f"job.test_limit={args.test_limit}"] if args.test_limit else []
    job = TrainingJob.load(DEFAULT_JOB, overrides)
    minutes = job.run.train.time_budget_min
    print(f"figure: the default job, {minutes:g} min ({job.preset_note})", flush=True)
    ours = None
    if not args.anchor_only:
        t0 = time.perf_counter()
        ours = run_training(job)
        ours_wall = time.perf_counter() - t0
        history = TrackedRun(os.environ["MLFLOW_TRACKING_URI"], ours.mlflow_run_id).metric_history("train/tokens_per_s")
        ours_tok_s = sum(v for _, v in history) / max(len(history), 1)
        print(f"figure: test BLEU {ours.test['test/bleu']:.2f}, {ours.steps} steps, {ours_tok_s:,.0f} tok/s", flush=True)

    train_data = resolve_train_data(job)
    spm = tokenizer_for(train_data, job)
    precision = "bf16 autocast" if args.anchor_bf16 else "fp32"
    print(f"anchor: MarianMTModel from scratch, {minutes:g} min, {os.cpu_count()} torch threads, {precision}, "
          f"{args.anchor_recipe}'s recipe", flush=True)
    workers = ours.workers if ours else job.job.workers or 2
    test = load_pairs(job.job.test_data, job, job.job.test_limit, spread=True)
    rates = [float(x) for x in args.anchor_lr.split(",")] if args.anchor_recipe == "hf" else [0.0]
    anchors = []  # (test BLEU, steps, tokens/s, scores, lr)
    for lr in rates:
        model, steps, tok_s, tok = train_marian(job, train_data, str(spm), minutes, workers,
                                                log=lambda m: print(m, flush=True), bf16=args.anchor_bf16,
                                                recipe=args.anchor_recipe, lr=lr, batch=args.anchor_batch)
        hyps, sent_s = decode_marian(model, tok, [s for s, _ in test], beam=job.job.test_beam)
        del model
        scores = score_translations(hyps, [t for _, t in test])
        anchors.append((scores["test/bleu"], steps, tok_s, scores, lr))
        print(f"anchor{f' (lr {lr:g})' if lr else ''}: test BLEU {scores['test/bleu']:.2f}, {steps} steps, "
              f"{tok_s:,.0f} tok/s, decoding {sent_s:.1f} sentences/s", flush=True)
    marian_bleu, steps, marian_tok_s, marian, best_lr = max(anchors, key=lambda a: a[0])
    if len(anchors) > 1:
        print(f"anchor: the best of {len(anchors)} learning rates is {best_lr:g}", flush=True)

    if ours is None:
        return 0
    ratio = lambda a, b: a / b if b else float("inf")  # noqa: E731
    print(f"\n{platform.node()} ({os.cpu_count()} CPUs), {time.strftime('%Y-%m-%d')}, load {os.getloadavg()[0]:.2f}; "
          f"{len(test)} test pairs, beam {job.job.test_beam}; mtcore's whole run took {ours_wall / 60:.1f} min")
    print(f"anchor: HF Marian with {args.anchor_recipe}'s recipe{f', lr {best_lr:g}' if best_lr else ''}")
    print(f"{'':22}{'mtcore default':>16}{'HF Marian':>12}{'mtcore/Marian':>15}")
    print(f"{'test BLEU':22}{ours.test['test/bleu']:>16.2f}{marian_bleu:>12.2f}{ratio(ours.test['test/bleu'], marian_bleu):>15.2f}")
    print(f"{'training tokens/s':22}{ours_tok_s:>16,.0f}{marian_tok_s:>12,.0f}{ratio(ours_tok_s, marian_tok_s):>15.2f}")
    print(f"{'steps':22}{ours.steps:>16}{steps:>12}{ratio(ours.steps, steps):>15.2f}")
    print(f"signature: {ours.test['test/bleu_signature']} (anchor: {marian['test/bleu_signature']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
