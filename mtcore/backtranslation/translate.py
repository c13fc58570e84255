"""Back-translating monolingual text on Ray Data: an actor pool, one model load per actor.

Batches are sorted by length before they are cut (padding is what makes batched
decoding slow), and actors ask for a GPU each when the cluster has them.
"""

from __future__ import annotations

import pyarrow as pa

from mtcore.backtranslation.config import BTConfig

BATCH_SIZE = 64


class BackTranslator:
    """Ray Data callable class: `text` (Vietnamese) in, `synthetic` (English) out."""

    def __init__(self, checkpoint_dir: str, mode: str, decode, seed: int):
        import torch

        from mtcore.nmt.checkpoint import load_checkpoint

        torch.set_num_threads(1)  # one CPU per actor: Ray scheduled it so
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.ckpt = load_checkpoint(checkpoint_dir, device=self.device)
        self.mode, self.decode, self.seed = mode, decode, seed

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch.column("text").to_pylist()
        if self.mode != "noised":
            synthetic = translate_texts(self.ckpt, texts, self.mode, self.decode, self.seed)
            return batch.append_column("synthetic", pa.array(synthetic, pa.string()))
        # noised: the synthetic filter judges the translation (`synthetic_clean`), and training reads its noised copy.
        # Judged after the noise, 5.7 % of good pairs fell to the rules (a dropped placeholder, a length ratio) and
        # the noise that touched a placeholder or a number never reached training.
        clean = translate_texts(self.ckpt, texts, "beam", self.decode, self.seed)
        return (batch.append_column("synthetic", pa.array(add_noise(texts, clean, self.seed), pa.string()))
                .append_column("synthetic_clean", pa.array(clean, pa.string())))


def add_noise(texts: list[str], hyps: list[str], seed: int) -> list[str]:
    """Edunov et al.'s noise on each hypothesis, seeded per source sentence: its noise does not depend on its batch."""
    import random
    import zlib

    from mtcore.nmt.noise import noise_text

    return [noise_text(h, random.Random(seed + zlib.crc32(t.encode()))) for t, h in zip(texts, hyps)]


def translate_texts(ckpt, texts: list[str], mode: str, decode, seed: int) -> list[str]:
    """The three modes of Edunov et al. 2018: beam, unrestricted-ish sampling (top-k), noised beam.
    `decode`: the DecodeConfig of `BTConfig.decode()` (sampling set in `sample` mode)."""
    import zlib

    import torch

    from mtcore.nmt.decoding import translate

    if mode == "sample":
        # Seeded per batch content, so a rerun (or a retried Ray task) gives the same output; the batches are the same
        # on any machine (`back_translate_table` cuts them from the length-sorted set, whatever the actor count).
        device = next(ckpt.model.parameters()).device  # multinomial wants the generator on the logits' device (a GPU)
        generator = torch.Generator(device=device).manual_seed(seed + zlib.crc32("\n".join(texts).encode()))
        return translate(ckpt.model, ckpt.tokenizer, texts, decode, generator=generator)
    hyps = translate(ckpt.model, ckpt.tokenizer, texts, decode)
    return add_noise(texts, hyps, seed) if mode == "noised" else hyps


def back_translate_table(mono: pa.Table, checkpoint_dir: str, cfg: BTConfig) -> pa.Table:
    """Translate `mono` (columns text, origin, id) on Ray Data; rows come back sorted by id."""
    import ray

    from mtcore.distributed.cluster import available_cpus, available_gpus, init_ray, map_with_actors

    init_ray()
    if not len(mono):
        return mono.append_column("synthetic", pa.array([], pa.string()))
    order = pa.compute.sort_indices(pa.compute.utf8_length(mono.column("text")))
    ordered = mono.take(order)
    gpus = available_gpus()
    actors = max(1, gpus if gpus else min(available_cpus(), max(1, len(mono) // BATCH_SIZE)))
    # One Arrow table is one block, and one block goes to one actor: cut it into several per actor,
    # each a run of similar lengths, so every actor has work and finishes at about the same time.
    # A multiple of the batch size: batches are then the same runs of BATCH_SIZE sorted rows on any machine, so sampled
    # output (seeded per batch) does not depend on the number of CPUs (a review found 6 of 6 sentences differ).
    rows_per_block = -(-max(BATCH_SIZE, -(-len(ordered) // (4 * actors))) // BATCH_SIZE) * BATCH_SIZE
    blocks = [ordered.slice(i, rows_per_block) for i in range(0, len(ordered), rows_per_block)]
    ds = map_with_actors(
        ray.data.from_arrow(blocks),
        BackTranslator,
        fn_constructor_kwargs=dict(checkpoint_dir=checkpoint_dir, mode=cfg.mode, decode=cfg.decode(), seed=cfg.seed),
        compute=ray.data.ActorPoolStrategy(size=actors),
        batch_size=BATCH_SIZE,
        batch_format="pyarrow",
        num_gpus=1 if gpus else 0,
        num_cpus=1,
    )
    translated = pa.concat_tables(ray.get(ds.to_arrow_refs()))
    return translated.take(pa.compute.sort_indices(translated, [("id", "ascending")]))  # blocks finish in any order
