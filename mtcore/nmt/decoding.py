"""Batched decoding: greedy, beam search (§6.1 of Vaswani et al.; GNMT length penalty), sampling.

Every search is written once over a *stepper* that returns next-token log-probabilities
for a batch of prefixes:
- `_CachedStepper` feeds one new position per step (`model.decode_step`). Transformer:
  self-attention keys/values grow by one position, cross-attention keys/values are
  projected once per source. RNN (`mtcore.nmt.rnn`): the cache is the recurrent state and the
  last attentional vector (fixed size), plus the encoder states and their attention keys,
  computed once per source. The target side is reordered with the beams; the source side is
  the same for every beam of a sentence, so it is only cut when sentences leave the batch;
- `_NaiveStepper` re-runs the decoder over the whole prefix each step (the Annotated
  Transformer's `greedy_decode`), kept as the reference for tests and benchmarks.
Both must give the same output (`use_cache=False` selects the naive one).

Sentences leave the batch as soon as they finish, so a long sentence does not keep
short ones computing. Outputs are token ids without BOS/EOS.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence

import torch

from mtcore.config import GREEDY, DecodeConfig, Sampling, TrainConfig
from mtcore.nmt.batching import pad
from mtcore.nmt.model import Seq2Seq
from mtcore.nmt.noise import noise_text
from mtcore.nmt.tokenizer import BOS_ID, BT_TAG, EOS_ID, PAD_ID, Tokenizer, normalize

log = logging.getLogger(__name__)

# The defaults live in DecodeConfig; these names are its values, for signatures and printouts.
DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B = DecodeConfig.max_len_a, DecodeConfig.max_len_b
DEFAULT_LEN_PENALTY = DecodeConfig.len_penalty
# What a run's own test decode takes from its `train` section (ray_training's `_evaluate_on_cluster`); its beam is
# `job.test_beam`, which the checkpoint does not keep.
RUN_FIELDS = ("len_penalty", "max_len_a", "max_len_b")


def run_decode(train_cfg: TrainConfig | None, decode: DecodeConfig | None = None) -> DecodeConfig:
    """`decode` (default: DecodeConfig's) with the length penalty and bound the run decoded its test set with; a
    checkpoint without a `train` section keeps `decode`'s. `translate`/`evaluate` defaulted to DecodeConfig's 0.7,
    1.5 and 10 whatever the run said: another BLEU than the run's for the same checkpoint and test set."""
    decode = decode if decode is not None else DecodeConfig()
    if train_cfg is None:
        return decode
    return decode.replace(**{k: getattr(train_cfg, k) for k in RUN_FIELDS})


# --------------------------------------------------------------------------- steppers


class _CachedStepper:
    def __init__(self, model: Seq2Seq, src: torch.Tensor):
        self.model = model
        memory, self.src_mask = model.encode(src)  # (B, S, d), (B, 1, 1, S)
        self.cache = model.init_cache(memory)

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (N, t) -> next-token logits (N, V); only the last position is fed."""
        return self.model.decode_step(tokens[:, -1:], self.src_mask, self.cache, tokens.size(1) - 1)

    def logprobs(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (N, t) -> log p(next | prefix) (N, V)."""
        return _log_softmax(self.logits(tokens))

    def reorder(self, index: torch.Tensor) -> None:
        self.src_mask = self.src_mask.index_select(0, index)
        for layer_cache in self.cache:
            layer_cache.reorder(index)

    def reorder_beams(self, index: torch.Tensor, source_rows: torch.Tensor | None) -> None:
        """`reorder` for beams that move within their sentence: the source side (mask, cross-attention
        keys/values) is the same for every beam of a sentence, so it is only cut when sentences finish."""
        if source_rows is not None:
            self.src_mask = self.src_mask.index_select(0, source_rows)
        for layer_cache in self.cache:
            layer_cache.reorder_beams(index, source_rows)


class _NaiveStepper:
    def __init__(self, model: Seq2Seq, src: torch.Tensor):
        self.model = model
        self.memory, self.src_mask = model.encode(src)

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.decode(tokens, self.memory, self.src_mask)[:, -1]  # (N, V)

    def logprobs(self, tokens: torch.Tensor) -> torch.Tensor:
        return _log_softmax(self.logits(tokens))

    def reorder(self, index: torch.Tensor) -> None:
        self.memory, self.src_mask = self.memory.index_select(0, index), self.src_mask.index_select(0, index)

    def reorder_beams(self, index: torch.Tensor, source_rows: torch.Tensor | None) -> None:
        if source_rows is not None:  # the prefix is fed whole each step: only the source side is state
            self.reorder(source_rows)


def _never_generated(scores: torch.Tensor) -> torch.Tensor:
    """-inf in the PAD and BOS columns of (rows, V) `scores`, in place: neither is ever generated."""
    scores[:, PAD_ID] = scores[:, BOS_ID] = float("-inf")
    return scores


def _only_eos(scores: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """-inf in every column but EOS of the `rows` (bool, per row) of (rows, V) `scores`, in place: at its
    length limit a hypothesis ends with EOS and pays its log-probability, as in fairseq; one finished as it
    stood would skip that term and beat hypotheses that ended properly."""
    eos = scores[:, EOS_ID].clone()
    scores[rows] = float("-inf")
    scores[:, EOS_ID] = eos
    return scores


def _log_softmax(logits: torch.Tensor) -> torch.Tensor:
    return _never_generated(logits.float().log_softmax(dim=-1))


def _chunk_size(vocab: int) -> int:
    """The largest divisor of the vocabulary size up to 64 that leaves at least 2 chunks (1 if none)."""
    return next((c for c in range(min(64, vocab // 2), 1, -1) if vocab % c == 0), 1)


def top_candidates(logits: torch.Tensor, scores: torch.Tensor, count: int,
                   eos_only: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The `count` best extensions of each sentence's beams: (values, flat indices beam * V + token), each
    (n, count), values = score + log p(token). logits (n * k, V), scores (n, k); count ≤ 2 * k ≤ V.
    Writes -inf into the PAD and BOS columns of `logits` (in place when it is float32 and contiguous).

    The same as `(scores[:, :, None] + log_softmax(logits)).view(n, k * V).topk(count)` up to float
    rounding, without materialising the log-softmax and the sum, and without a top-k over k * V scores
    (measured, mini, vocabulary 8,000, beam 5: 2.4 ms a step instead of 4.2): log p = logit − logsumexp,
    so each beam's offset (score − logsumexp) is added to the candidates only; and the vocabulary is cut
    into chunks whose maxima are taken first (one more read of the logits, as the logsumexp is). Every one
    of the `count` best candidates lies in one of the `count` chunks with the highest maxima (a chunk
    holding none of them has a maximum below all of them), so the exact top-k is taken over those chunks
    only. PAD and BOS are never generated; the normalisation includes them, as in `_log_softmax`.
    `eos_only` (n,): sentences at their length limit, whose beams may only end, with EOS at its own
    log-probability (fairseq masks every other token after the softmax, not before)."""
    n, k = scores.shape
    vocab = logits.size(-1)
    logits = logits.float().contiguous()  # the naive stepper gives a strided slice
    offset = scores - logits.logsumexp(dim=-1).view(n, k)  # (n, k)
    _never_generated(logits)
    if eos_only is not None and bool(eos_only.any()):
        _only_eos(logits, eos_only.repeat_interleave(k))
    c = _chunk_size(vocab)
    m = vocab // c  # chunks per beam
    chunk_best = logits.view(n, k, m, c).amax(dim=-1) + offset[:, :, None]  # (n, k, m)
    chunks = chunk_best.view(n, k * m).topk(count, dim=1).indices  # (n, count), chunk ids over beams × chunks
    cand = logits.view(n, k * m, c).gather(1, chunks[:, :, None].expand(-1, -1, c))  # (n, count, c)
    cand = cand + offset.gather(1, chunks // m)[:, :, None]
    values, pos = cand.view(n, count * c).topk(count, dim=1)
    return values, chunks.gather(1, pos // c) * c + pos % c


def _stepper(model, src, use_cache):
    return (_CachedStepper if use_cache else _NaiveStepper)(model, src)


def length_limit(src_len: int, a: float, b: int, max_positions: int) -> int:
    """floor(a * src_len) + b output tokens (EOS included) for a source of `src_len` tokens (EOS included), within
    the position table. In Python floats (float64) and ints: on the device MPS has no float64, and float32 rounds
    a * src_len otherwise; a huge a or b (a user's "no limit") is capped before it can overflow."""
    cap = max_positions - 1
    return max(1, min(math.floor(min(a * src_len, cap)) + b, cap))


def max_lengths(model: Seq2Seq, src: torch.Tensor, a: float, b: int) -> torch.Tensor:
    """Per sentence (B,): `length_limit` of its source, on `src`'s device."""
    src_len = (src != PAD_ID).sum(dim=1).tolist()  # (B,)
    return torch.tensor([length_limit(n, a, b, model.cfg.max_positions) for n in src_len], device=src.device)


# --------------------------------------------------------------------------- greedy and sampling


def _left_to_right(model, src, pick: Callable[[torch.Tensor], torch.Tensor], max_len_a, max_len_b, use_cache):
    B = src.size(0)
    stepper = _stepper(model, src, use_cache)
    limits = max_lengths(model, src, max_len_a, max_len_b)  # (B,)
    alive = torch.arange(B, device=src.device)  # original row of each active sentence
    tokens = torch.full((B, 1), BOS_ID, dtype=torch.long, device=src.device)
    out: list[list[int]] = [[] for _ in range(B)]
    for t in range(int(limits.max())):
        nxt = pick(_only_eos(stepper.logprobs(tokens), t + 1 >= limits[alive]))  # (n,): the limit's token is EOS
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)  # (n, t + 2)
        done = (nxt == EOS_ID) | (t + 1 >= limits[alive])
        if done.any():
            for i in done.nonzero().flatten().tolist():
                out[alive[i]] = _strip(tokens[i, 1:].tolist())
            keep = (~done).nonzero().flatten()
            if keep.numel() == 0:
                break
            alive, tokens = alive[keep], tokens[keep]
            stepper.reorder(keep)
    return out


def _strip(seq: list[int]) -> list[int]:
    return seq[:-1] if seq and seq[-1] == EOS_ID else seq


@torch.inference_mode()
def greedy_decode(
    model: Seq2Seq,
    src: torch.Tensor,  # (B, S) source ids + EOS, PAD-padded
    *,
    max_len_a: float = DEFAULT_MAX_LEN_A,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    use_cache: bool = True,
) -> list[list[int]]:
    return _left_to_right(model, src, lambda lp: lp.argmax(dim=-1), max_len_a, max_len_b, use_cache)


def _sampler(cfg: Sampling, generator: torch.Generator | None):
    def pick(lp: torch.Tensor) -> torch.Tensor:
        logits = lp / cfg.temperature  # (n, V)
        if cfg.top_k:
            kth = logits.topk(min(cfg.top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (n, 1)
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if cfg.top_p < 1.0:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(dim=-1)
            drop = probs.cumsum(dim=-1) - probs > cfg.top_p  # keep the smallest prefix with mass >= top_p
            logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
        return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)

    return pick


@torch.inference_mode()
def sample_decode(
    model: Seq2Seq,
    src: torch.Tensor,
    sampling: Sampling = Sampling(),
    *,
    generator: torch.Generator | None = None,
    max_len_a: float = DEFAULT_MAX_LEN_A,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    use_cache: bool = True,
) -> list[list[int]]:
    """Ancestral sampling with temperature, top-k and top-p (Edunov et al. 2018 found sampled BT helps)."""
    return _left_to_right(model, src, _sampler(sampling, generator), max_len_a, max_len_b, use_cache)


# --------------------------------------------------------------------------- beam search


def length_penalty(length: int, alpha: float) -> float:
    """GNMT (Wu et al. 2016, §7): lp(Y) = ((5 + |Y|) / 6)^alpha; scores are log P(Y|X) / lp(Y)."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.inference_mode()
def beam_search(
    model: Seq2Seq,
    src: torch.Tensor,  # (B, S)
    *,
    beam: int = 5,
    len_penalty: float = DEFAULT_LEN_PENALTY,
    max_len_a: float = DEFAULT_MAX_LEN_A,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    use_cache: bool = True,
    n_best: int = 1,
) -> list[list[int]] | list[list[tuple[float, list[int]]]]:
    """Batched beam search. A sentence finishes early once it has `beam` finished hypotheses
    (an EOS among the top `beam` candidates finishes one, as in fairseq); at its length limit
    every live beam ends with EOS, scored (fairseq's forced EOS). Returns the best hypothesis
    per sentence, or with `n_best > 1` the `n_best` best (normalised score, tokens) per sentence.
    """
    B, k, dev = src.size(0), beam, src.device
    V = model.cfg.vocab_size
    if V < 2 * k:
        raise ValueError(f"beam {k} needs a vocabulary of at least {2 * k} tokens, not {V}")
    stepper = _stepper(model, src, use_cache)
    stepper.reorder(torch.arange(B, device=dev).repeat_interleave(k))  # rows: sentence-major, beam-minor
    limits = max_lengths(model, src, max_len_a, max_len_b)
    alive = torch.arange(B, device=dev)
    scores = torch.zeros(B, k, device=dev)  # (n, k) summed log-probs of live beams
    scores[:, 1:] = float("-inf")  # all beams start identical: expand only the first
    tokens = torch.full((B * k, 1), BOS_ID, dtype=torch.long, device=dev)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    n_finished = torch.zeros(B, dtype=torch.long, device=dev)  # len(finished[i]), without a Python loop per step
    rank_2k = torch.arange(2 * k, device=dev)
    beam_range = torch.arange(k, device=dev)
    for t in range(int(limits.max())):
        n, length = alive.numel(), t + 1  # length of the hypotheses after this step (EOS counted)
        at_limit = length >= limits[alive]  # (n,): these sentences' beams can only end now
        top_scores, top_idx = top_candidates(stepper.logits(tokens), scores, 2 * k, at_limit)  # (n, 2k)
        origin, tok = top_idx // V, top_idx % V  # (n, 2k) beam each candidate extends, its token
        is_eos = tok == EOS_ID
        lp_now = length_penalty(length, len_penalty)
        eos_hits = is_eos[:, :k] & top_scores[:, :k].isfinite()
        for r, c in eos_hits.nonzero().tolist():
            prefix = tokens[r * k + origin[r, c], 1:].tolist()
            finished[alive[r]].append((top_scores[r, c].item() / lp_now, prefix))
        n_finished[alive] += eos_hits.sum(dim=1)
        live = (is_eos.long() * 2 * k + rank_2k).argsort(dim=1)[:, :k]  # (n, k) best k non-EOS candidates
        scores, origin, tok = top_scores.gather(1, live), origin.gather(1, live), tok.gather(1, live)
        reorder = (torch.arange(n, device=dev)[:, None] * k + origin).view(-1)  # (n * k,)
        tokens = torch.cat([tokens.index_select(0, reorder), tok.view(-1, 1)], dim=1)  # (n * k, t + 2)
        done = at_limit | (n_finished[alive] >= k)  # (sentences at their limit ended every beam: they are done)
        if done.all():
            break
        source_rows = None  # beams moved within their sentences: the source side stays
        if done.any():
            keep = (~done).nonzero().flatten()
            rows = (keep[:, None] * k + beam_range).view(-1)
            alive, scores, tokens, reorder, source_rows = alive[keep], scores[keep], tokens[rows], reorder[rows], rows
        stepper.reorder_beams(reorder, source_rows)
    results = [sorted(f, key=lambda h: -h[0])[:n_best] for f in finished]
    if n_best == 1:
        return [r[0][1] for r in results]
    return results


# --------------------------------------------------------------------------- text in, text out


def encode_sources(tokenizer: Tokenizer, texts: Sequence[str], *, bt_tag: bool = False, max_len: int = 1022,
                   names: Sequence[str] | None = None) -> list[list[int]]:
    """Source ids as the model was trained on them: ids + EOS; over-long sources are cut.

    `bt_tag=True` encodes f"{BT_TAG} {text}", exactly what a tagged back-translated training
    source holds (SentencePiece gives it as [▁, <bt>, ▁text...], not [<bt>, ▁text...]). `names`: what a warning
    calls each source (default `source I`, from 0), e.g. the input's line numbers.
    """
    if bt_tag:
        texts = [f"{BT_TAG} {t}" for t in texts]
    out = []
    for i, ids in enumerate(tokenizer.encode(list(texts))):
        if len(ids) + 1 > max_len:
            log.warning("%s has %d tokens; cut to %d", names[i] if names else f"source {i}", len(ids) + 1, max_len)
            ids = ids[: max_len - 1]
        out.append(ids + [EOS_ID])
    return out


def resolve(decode: DecodeConfig | None, fields: dict) -> DecodeConfig:
    """`decode` (default: greedy) with keyword fields (`beam=4`, …) applied on top."""
    base = decode if decode is not None else GREEDY
    return base.replace(**fields) if fields else base


@torch.inference_mode()
def translate_ids(
    model: Seq2Seq,
    sources: Sequence[list[int]],
    decode: DecodeConfig | None = None,
    *,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    **fields,
) -> list[list[int]]:
    """Decode id sequences (with EOS) in length-sorted batches; output in input order.
    `decode` (default greedy) says how; DecodeConfig fields given as keywords override it."""
    cfg = resolve(decode, fields)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    kw = dict(max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b, use_cache=use_cache)
    for start in range(0, len(order), cfg.batch_size):
        idx = order[start : start + cfg.batch_size]
        src = pad([sources[i] for i in idx]).to(device)
        if cfg.sampling is not None:
            hyps = sample_decode(model, src, cfg.sampling, generator=generator, **kw)
        elif cfg.beam == 1:
            hyps = greedy_decode(model, src, **kw)
        else:
            hyps = beam_search(model, src, beam=cfg.beam, len_penalty=cfg.len_penalty, **kw)
        for i, h in zip(idx, hyps):
            out[i] = h
    model.train(was_training)
    return out


@torch.inference_mode()
def nbest_ids(model: Seq2Seq, sources: Sequence[list[int]], decode: DecodeConfig | None = None,
              **fields) -> list[list[list[int]]]:
    """The `n_best` best hypotheses (token ids, best first) of a beam search per source; input order."""
    cfg = resolve(decode, fields)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[list[int]]] = [[] for _ in sources]
    for start in range(0, len(order), cfg.batch_size):
        idx = order[start : start + cfg.batch_size]
        src = pad([sources[i] for i in idx]).to(device)
        found = beam_search(model, src, beam=cfg.beam, len_penalty=cfg.len_penalty, max_len_a=cfg.max_len_a,
                            max_len_b=cfg.max_len_b, n_best=max(cfg.n_best, 2))  # 2: always the (score, tokens) form
        for i, hyps in zip(idx, found):
            out[i] = [tokens for _, tokens in hyps[:cfg.n_best]]
    model.train(was_training)
    return out


@torch.inference_mode()
def sequence_scores(model: Seq2Seq, sources: Sequence[list[int]], targets: Sequence[list[int]],
                    batch_size: int = 64) -> list[float]:
    """Mean log-probability per target token (EOS included) of each target given its source (forced
    decoding): the same yardstick for greedy, beam and sampled output, comparable across sentences."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    scores = [0.0] * len(sources)
    for start in range(0, len(sources), batch_size):
        idx = list(range(start, min(start + batch_size, len(sources))))
        src = pad([sources[i] for i in idx]).to(device)
        tgt_in = pad([[BOS_ID] + targets[i] for i in idx]).to(device)
        tgt_out = pad([targets[i] + [EOS_ID] for i in idx]).to(device)
        logp = torch.log_softmax(model(src, tgt_in).float(), dim=-1).gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)
        mask = tgt_out != PAD_ID
        for j, i in enumerate(idx):
            scores[i] = float((logp[j] * mask[j]).sum() / mask[j].sum())
    model.train(was_training)
    return scores


def translate(
    model: Seq2Seq,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    decode: DecodeConfig | None = None,
    *,
    bt_tag: bool = False,
    **kwargs,
) -> list[str]:
    """Detokenised translations of `texts`; `decode` and keyword arguments as `translate_ids`.
    `bt_tag=True` prefixes each source with the `<bt>` tag (tagged back-translation, Caswell et al. 2019).
    A blank text's translation is blank, as `python -m mtcore.translate` and `mtcore.evaluate` give it (a model asked
    to translate nothing invents text, and a run's test BLEU differed from `evaluate`'s on the same pairs)."""
    def filled(some: list[str]) -> list[str]:
        sources = encode_sources(tokenizer, some, bt_tag=bt_tag, max_len=model.cfg.max_positions - 1)
        return tokenizer.decode(translate_ids(model, sources, decode, **kwargs))
    return blanks_kept(texts, filled)


def blanks_kept(texts: Sequence[str], translate_filled: Callable[[list[str]], list[str]]) -> list[str]:
    """`translate_filled` over the texts with something left once normalised (`tokenizer.normalize`: whitespace,
    zero-width spaces, soft hyphens...); a blank text's translation is blank. The exported runtimes' helpers use it
    too: the HF export, asked for "" or "   ", made up a row of backslashes."""
    keep = [i for i, text in enumerate(texts) if normalize(text)]
    out = [""] * len(texts)
    for i, hyp in zip(keep, translate_filled([texts[i] for i in keep]) if keep else []):
        out[i] = hyp
    return out


def back_translate(
    model: Seq2Seq,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    noise: bool = True,
    seed: int = 0,
    beam: int = 5,
    **kwargs,
) -> list[str]:
    """Synthetic sources for back-translation: beam output, noised as in Edunov et al. 2018 when `noise`."""
    hyps = translate(model, tokenizer, texts, beam=beam, **kwargs)
    if not noise:
        return hyps
    rng = random.Random(seed)
    return [noise_text(h, rng) for h in hyps]
