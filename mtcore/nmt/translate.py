"""Translate lines with a checkpoint directory.

    python -m mtcore.translate --model DIR [--beam 5] [--batch-size 32] < in.txt > out.txt
    python -m mtcore.translate --model DIR -i in.txt -o out.txt --scores          # SCORE<TAB>TRANSLATION
    python -m mtcore.translate --model DIR -i in.txt --n-best 3                   # LINE<TAB>SCORE<TAB>TRANSLATION

One output line per input line, in order: a blank line gives a blank line, and a translation's
newline, carriage return or tab is written as a literal "\\n", "\\r" or "\\t" so that lines and
columns stay aligned. A score is the mean log-probability
per target token (EOS included) of the translation under the model: near 0 is confident,
below about -1.5 is worth a look. `--n-best K` writes the K best of the beam for each input
line, each with its input line number (from 0) and score, best score first (the beam itself ranks
by its GNMT length-penalised sum, so the first row can differ from the 1-best output).

The length penalty and bound default to the ones the run decoded its test set with (the checkpoint's
train.len_penalty, train.max_len_a/b), else DecodeConfig's; the summary on stderr says which were used.
"""

from __future__ import annotations

import argparse
import gzip
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from mtcore.console import DefaultsHelpFormatter, add_common_options, program, quiet
from mtcore import checks
from mtcore.errors import entry_point
from mtcore.nmt.checkpoint import checkpoint_dir, load_checkpoint
from mtcore.config import DecodeConfig, Sampling
from mtcore.data.corpus import ends_lines_in_bare_cr
from mtcore.nmt.decoding import RUN_FIELDS, encode_sources, nbest_ids, run_decode, sequence_scores, translate_ids
from mtcore.nmt.tokenizer import normalize

DEFAULT = DecodeConfig()


def decoding_args(parser: argparse.ArgumentParser) -> None:
    """Options shared by translate and evaluate; defaults are mtcore.config.DecodeConfig's, but for the length
    penalty and bound, which are the run's own where the checkpoint records them (`decode_config`)."""
    parser.add_argument("--model", required=True, help="checkpoint directory (model.pt, config.json, spm.model)")
    parser.add_argument("--beam", type=int, default=DEFAULT.beam, help="beam size; 1 = greedy")
    parser.add_argument("--len-penalty", type=float, help="GNMT length penalty alpha "
                        f"(default: the run's train.len_penalty, else {DEFAULT.len_penalty})")
    parser.add_argument("--max-len-a", type=float, help="output length <= a * source length + b "
                        f"(default: the run's train.max_len_a, else {DEFAULT.max_len_a})")
    parser.add_argument("--max-len-b", type=int, help="b of --max-len-a "
                        f"(default: the run's train.max_len_b, else {DEFAULT.max_len_b})")
    parser.add_argument("--batch-size", type=int, default=DEFAULT.batch_size, help="sentences per batch")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--bt-tag", action="store_true", help="prefix every source with the <bt> tag")
    parser.add_argument("--sample", action="store_true", help="sample instead of beam search")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (a sample depends on it and on --batch-size: the same pair of them, the same output)")


def check_beam_fits(args: argparse.Namespace, ckpt) -> None:
    """Beam search keeps 2 × beam candidates a step: the model's vocabulary bounds the beam (said once it is loaded)."""
    vocab = ckpt.model.cfg.vocab_size
    if not args.sample and 2 * args.beam > vocab:
        raise checks.UsageError(f"--beam {args.beam}: this model's vocabulary of {vocab} tokens allows a beam of at "
                                f"most {vocab // 2}")


def check_decoding_args(args: argparse.Namespace) -> None:
    """Ranges of the shared options, before the model is loaded."""
    checks.at_least("--beam", args.beam, 1)
    checks.at_least("--batch-size", args.batch_size, 1)
    for name in ("len_penalty", "max_len_a", "temperature", "top_p"):  # inf/nan would pass the range checks below
        if getattr(args, name) is not None and not math.isfinite(getattr(args, name)):
            raise checks.UsageError(f"--{name.replace('_', '-')}: {getattr(args, name)} is not a finite number")
    for name in ("len_penalty", "max_len_b", "top_k"):
        if getattr(args, name) is not None:  # None: the run's, checked when it was trained
            checks.at_least("--" + name.replace("_", "-"), getattr(args, name), 0)
    if args.max_len_a is not None and args.max_len_a <= 0:
        raise checks.UsageError(f"--max-len-a: {args.max_len_a} is out of range; pass a value > 0 (output length ≤ a·source + b)")
    check_device(args.device)
    if args.temperature <= 0:
        raise checks.UsageError(f"--temperature: {args.temperature} is out of range; pass a value > 0")
    if not 0 < args.top_p <= 1:
        raise checks.UsageError(f"--top-p: {args.top_p} is out of range; pass a value in (0, 1]")


def check_device(device: str) -> None:
    """A torch device this machine has, before a model is loaded onto it."""
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise checks.UsageError(f"--device: {device!r} is not a device; use cpu or cuda") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise checks.UsageError(f"--device: {device} is not available on this machine (no CUDA GPU); use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise checks.UsageError(f"--device: {device}: this machine has {torch.cuda.device_count()} GPU(s), numbered from 0")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise checks.UsageError(f"--device: {device} is not available on this machine; use --device cpu")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise checks.UsageError(f"--device: {device}: mtcore decodes on cpu, cuda or mps")


def read_lines(stream, name: str = "stdin") -> list[str]:
    """Lines of a binary stream as UTF-8 (a BOM is not text); a line that is not UTF-8 is an error naming it."""
    lines = []
    for i, raw in enumerate(stream, 1):
        if i == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if i == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise checks.UsageError(f"{name}: UTF-16 text (byte-order mark {raw[:2].hex(' ')}); convert it to UTF-8 "
                                    "(e.g. iconv -f UTF-16 -t UTF-8)")
        if i == 1 and raw.startswith(b"\x1f\x8b"):
            raise checks.UsageError(f"{name}: gzip-compressed; name it *.gz (read as such), or zcat it into stdin")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise checks.UsageError(f"{name} line {i}: not UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1}); "
                                    "convert the input to UTF-8 (e.g. iconv -t UTF-8)") from None
        lines.append(text.rstrip("\r\n"))
    if len(lines) == 1 and ends_lines_in_bare_cr(text.rstrip("\n")):  # N sentences read as one: one output line
        raise checks.UsageError(f"{name}: its lines end in a bare carriage return (\\r, old Mac line ends), which "
                                "would read as one line; convert them to \\n (e.g. tr '\\r' '\\n')")
    return lines


def decode_config(args: argparse.Namespace, ckpt=None) -> DecodeConfig:
    """The command line's decoding settings (ranges checked by `check_decoding_args`); a length penalty or bound not
    given is the one `ckpt`'s run decoded its test set with (`run_decode`), else DecodeConfig's."""
    given = {name: getattr(args, name) for name in RUN_FIELDS if getattr(args, name) is not None}
    return run_decode(ckpt.train_cfg if ckpt is not None else None).replace(
        beam=args.beam, batch_size=args.batch_size, n_best=getattr(args, "n_best", 1),
        sampling=Sampling(args.temperature, args.top_k, args.top_p) if args.sample else None, **given)


def describe_decoding(args: argparse.Namespace, ckpt) -> str:
    """The settings `decode_config` gives, in words, saying which are the run's: a score or an output is only
    comparable with one decoded alike."""
    decode = decode_config(args, ckpt)
    if decode.sampling is not None:
        s = decode.sampling
        how = f"sampled (temperature {s.temperature}, top-k {s.top_k}, top-p {s.top_p}, seed {args.seed})"
    else:
        how = f"beam {decode.beam}, len_penalty {decode.len_penalty}"
    shown = RUN_FIELDS[1:] if decode.sampling is not None else RUN_FIELDS  # sampling has no length penalty
    runs = [name for name in shown if getattr(args, name) is None and ckpt.train_cfg is not None]
    return (f"{how}, max_len_a {decode.max_len_a}, max_len_b {decode.max_len_b}"
            + (f" ({', '.join(runs)}: the run's train settings)" if runs else ""))


def sampling_generator(args: argparse.Namespace) -> torch.Generator | None:
    return torch.Generator(device=args.device).manual_seed(args.seed) if args.sample else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=program("python -m mtcore.translate"), description=__doc__.split("\n")[0],
                                     formatter_class=DefaultsHelpFormatter)
    decoding_args(parser)
    parser.add_argument("-i", "--input", default="-", help="source lines, UTF-8, gzip'd if it ends in .gz (- = stdin)")
    parser.add_argument("-o", "--output", default="-", help="translations (- = stdout)")
    parser.add_argument("--scores", action="store_true", help="SCORE<TAB>TRANSLATION: mean log-prob per token")
    parser.add_argument("--n-best", type=int, default=1, metavar="K", help="the K best of the beam per line (K <= --beam)")
    add_common_options(parser)
    return parser


@entry_point
def main(argv: list[str] | None = None, *, resolve: Callable[[str], Path] | None = None) -> int:
    """`resolve`: an MLflow `runs:/…` reference → a local checkpoint (the `mtcore.X` entry point passes the tracking layer's)."""
    args = build_parser().parse_args(argv)
    check_decoding_args(args)
    checks.at_least("--n-best", args.n_best, 1)
    if args.n_best > 1 and args.sample:
        raise checks.UsageError(f"--n-best: {args.n_best} lists a beam's hypotheses; leave out --sample")
    if args.n_best > args.beam:
        raise checks.UsageError(f"--n-best: {args.n_best} needs beam search with --beam >= {args.n_best}")
    if args.input != "-":
        checks.input_file("-i/--input", args.input)
    if args.output != "-":  # before the decoding, not after it
        checks.output_file("-o/--output", args.output)
    ckpt = load_checkpoint(checkpoint_dir(args.model, resolve), device=args.device)
    check_beam_fits(args, ckpt)
    if args.input == "-":
        lines = read_lines(sys.stdin.buffer)
    else:
        with (gzip.open if args.input.lower().endswith(".gz") else open)(args.input, "rb") as stream:
            try:
                lines = read_lines(stream, args.input)
            except (OSError, EOFError) as err:  # a damaged .gz
                raise checks.UsageError(f"-i/--input: {args.input}: not a readable gzip file: {err}") from None
    t0 = time.perf_counter()
    if args.output == "-":
        sys.stdout.reconfigure(encoding="utf-8")  # a C or Latin-1 locale's stdout cannot hold the translations
        write_rows(ckpt, lines, args, sys.stdout)
    elif Path(args.output).is_symlink() or Path(args.output).exists() and not Path(args.output).is_file():
        with open(args.output, "w", encoding="utf-8") as out:  # /dev/stdout, a named pipe: written in place
            write_rows(ckpt, lines, args, out)
    else:  # written under another name, renamed when whole: an interrupted run leaves no half file named OUTPUT
        partial = Path(f"{args.output}.partial")
        # OUT.gz is gzipped, as -i IN.gz is read: a plain file named .gz failed the next stage's gzip reader
        opener = gzip.open if str(args.output).lower().endswith(".gz") else open
        with opener(partial, "wt", encoding="utf-8") as out:
            write_rows(ckpt, lines, args, out)
        partial.replace(args.output)
    seconds = time.perf_counter() - t0
    blank = sum(1 for line in lines if is_blank(line))
    stderr_line(f"translated {len(lines) - blank:,} lines{f' ({blank:,} blank)' if blank else ''} in {seconds:.1f} s "
                f"({(len(lines) - blank) / max(seconds, 1e-9):.1f} lines/s)" + (f" → {args.output}" if args.output != "-" else "")
                + f"; {describe_decoding(args, ckpt)}")  # which settings made these translations
    return 0


def write_rows(ckpt, lines: list[str], args: argparse.Namespace, out) -> None:
    """The output rows of `lines`, one chunk at a time as it is decoded: a long input's first lines come out early."""
    def emit(rows: list[tuple[str, ...]]) -> None:
        out.write("".join("\t".join(one_cell(cell) for cell in row) + "\n" for row in rows))
        out.flush()
    translate_in_chunks(ckpt, lines, args, None if quiet() else stderr_line, emit=emit)


CHUNK_LINES = 256  # lines decoded between two looks at the clock
FIRST_CHUNK = 16  # ... after the first chunks, which double from this: a slow model's first progress line comes early


def stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # stdout is the translations'


def translate_in_chunks(ckpt, lines: list[str], args: argparse.Namespace, report=None, every_s: float = 10.0,
                        emit: Callable[[list], None] | None = None) -> list[tuple[str, ...]]:
    """`translate_lines` over chunks of the input, with progress (`in_chunks`). Greedy and beam output do not depend
    on the chunks (nor on batching); sampling draws from one random stream over the whole input."""
    generator = sampling_generator(args)

    def chunk_rows(chunk: list[str], start: int) -> list[tuple[str, ...]]:
        part = translate_lines(ckpt, chunk, args, list(range(start + 1, start + 1 + len(chunk))), generator=generator)
        if getattr(args, "n_best", 1) > 1:  # (line, score, translation): the line number in the whole input
            part = [(str(int(r[0]) + start), *r[1:]) for r in part]
        return part
    return in_chunks(lines, chunk_rows, report, every_s, emit=emit)


def in_chunks(items: list, decode_chunk: Callable[[list, int], list], report: Callable[[str], None] | None = None,
              every_s: float = 10.0, unit: str = "lines", emit: Callable[[list], None] | None = None) -> list:
    """`decode_chunk(chunk, start)` over chunks of CHUNK_LINES items (the first ones smaller: FIRST_CHUNK, doubling;
    the same sizes on every run, so that sampling's draws are too), concatenated, with `report(line)` every
    `every_s` seconds: a 100,000-line file shows that it is moving. `emit(part)` gets each chunk's part when done.
    (With chunks of 256 from the start, 300 long lines at beam 5 printed nothing for 26 s.)"""
    out: list = []
    t0 = last = time.perf_counter()
    start, size = 0, min(FIRST_CHUNK, CHUNK_LINES)
    while start < len(items):
        chunk = items[start:start + size]
        part = decode_chunk(chunk, start)
        out += part
        if emit is not None:
            emit(part)
        now = time.perf_counter()
        if report is not None and now - last >= every_s and start + len(chunk) < len(items):
            done = start + len(chunk)
            report(f"translated {done:,} of {len(items):,} {unit} ({done / (now - t0):.1f} {unit}/s)")
            last = now
        start, size = start + len(chunk), min(2 * size, CHUNK_LINES)
    return out


_ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\f": "\\f", "\x1c": " ", "\x1d": " ",
                          "\x1e": " ", "\x85": " ", "\u2028": " ", "\u2029": " "})


def one_cell(text: str) -> str:
    """A translation as one TSV cell on one line: the characters that end a line or a cell (for `wc -l`, `cut` and
    Python's `splitlines`) are escaped or made spaces."""
    return text.translate(_ESCAPES)


NO_SCORE = "nan"  # a blank line's score: pandas and sacrebleu-style tools read it as missing


def is_blank(line: str) -> bool:
    """Nothing left once normalised (whitespace, zero-width spaces, soft hyphens, a BOM): nothing to translate."""
    return not normalize(line)


def translate_lines(ckpt, lines: list[str], args: argparse.Namespace, line_numbers: list[int] | None = None,
                    generator: torch.Generator | None = None) -> list[tuple[str, ...]]:
    """The output rows: (translation,), (score, translation) or, for n-best, (line, score, translation).
    A blank line is translated as a blank line (a model asked for it invents text), with the score `nan`: there is
    nothing it is confident about (0.0000 read as the most confident line of all). `line_numbers`: each line's
    number in the input (from 1), for warnings. `generator`: sampling's random stream (default: a new one from --seed)."""
    line_numbers = line_numbers or list(range(1, len(lines) + 1))
    filled = [i for i, line in enumerate(lines) if not is_blank(line)]
    if len(filled) < len(lines):
        rows = translate_lines(ckpt, [lines[i] for i in filled], args, [line_numbers[i] for i in filled],
                               generator) if filled else []
        if getattr(args, "n_best", 1) > 1:  # (line, score, translation): line numbers back to the input's
            return sorted([(str(filled[int(r[0])]), *r[1:]) for r in rows] +
                          [(str(i), NO_SCORE, "") for i in range(len(lines)) if is_blank(lines[i])], key=lambda r: int(r[0]))
        out = [(NO_SCORE, "") if getattr(args, "scores", False) else ("",)] * len(lines)
        for i, row in zip(filled, rows):
            out[i] = row
        return out
    if not lines:
        return []
    model, tok = ckpt.model, ckpt.tokenizer
    decode = decode_config(args, ckpt)
    sources = encode_sources(tok, lines, bt_tag=args.bt_tag, max_len=model.cfg.max_positions - 1,
                             names=[f"input line {n}" for n in line_numbers])
    if decode.n_best > 1:
        found = nbest_ids(model, sources, decode)
        flat = [(i, ids) for i, hyps in enumerate(found) for ids in hyps]
        scores = sequence_scores(model, [sources[i] for i, _ in flat], [ids for _, ids in flat])
        texts = tok.decode([ids for _, ids in flat])
        # best first by the score printed: the beam ranks by its length-penalised sum, which can order two close
        # hypotheses the other way round (a list whose scores did not fall read as a bug)
        rows = sorted(zip(flat, scores, texts), key=lambda r: (r[0][0], -r[1]))
        return [(str(i), f"{s:.4f}", t) for (i, _), s, t in rows]
    ids = translate_ids(model, sources, decode, generator=generator or sampling_generator(args))
    texts = tok.decode(ids)
    if not getattr(args, "scores", False):  # evaluate's arguments have no --scores
        return [(t,) for t in texts]
    return [(f"{s:.4f}", t) for s, t in zip(sequence_scores(model, sources, ids), texts)]


if __name__ == "__main__":
    sys.exit(main())
