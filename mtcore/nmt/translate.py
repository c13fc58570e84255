"""Translate lines from stdin with a checkpoint directory.

    python -m mtcore.translate --model DIR [--beam 5] [--batch-size 32] < in.txt > out.txt

One output line per input line, in order (a translation containing a newline has it
written as a literal "\\n" so that lines stay aligned).
"""

from __future__ import annotations

import argparse
import sys

import torch

from mtcore import checks
from mtcore.errors import entry_point
from mtcore.nmt.checkpoint import load_checkpoint
from mtcore.nmt.decoding import DEFAULT_LEN_PENALTY, DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B, Sampling, translate


def decoding_args(parser: argparse.ArgumentParser) -> None:
    """Options shared by translate and evaluate; defaults live in mtcore.nmt.decoding."""
    parser.add_argument("--model", required=True, help="checkpoint directory (model.pt, config.json, spm.model)")
    parser.add_argument("--beam", type=int, default=5, help="beam size; 1 = greedy")
    parser.add_argument("--len-penalty", type=float, default=DEFAULT_LEN_PENALTY, help="GNMT length penalty alpha")
    parser.add_argument("--max-len-a", type=float, default=DEFAULT_MAX_LEN_A)
    parser.add_argument("--max-len-b", type=int, default=DEFAULT_MAX_LEN_B)
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--bt-tag", action="store_true", help="prefix every source with the <bt> tag")
    parser.add_argument("--sample", action="store_true", help="sample instead of beam search")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")


def check_decoding_args(args: argparse.Namespace) -> None:
    """Ranges of the shared options, before the model is loaded."""
    checks.at_least("--beam", args.beam, 1)
    checks.at_least("--batch-size", args.batch_size, 1)
    for name in ("len_penalty", "max_len_a", "max_len_b", "top_k"):
        checks.at_least("--" + name.replace("_", "-"), getattr(args, name), 0)
    if args.temperature <= 0:
        raise checks.UsageError(f"--temperature: {args.temperature} is out of range; pass a value > 0")
    if not 0 < args.top_p <= 1:
        raise checks.UsageError(f"--top-p: {args.top_p} is out of range; pass a value in (0, 1]")


def read_lines(stream) -> list[str]:
    """Lines of a binary stream as UTF-8; a line that is not UTF-8 is an error naming it."""
    lines = []
    for i, raw in enumerate(stream, 1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError as err:
            raise checks.UsageError(f"stdin line {i}: not UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1}); "
                                    "convert the input to UTF-8 (e.g. iconv -t UTF-8)") from None
    return lines


def decoding_kwargs(args: argparse.Namespace) -> dict:
    kw = dict(beam=args.beam, len_penalty=args.len_penalty, max_len_a=args.max_len_a, max_len_b=args.max_len_b,
              batch_size=args.batch_size, bt_tag=args.bt_tag)
    if args.sample:
        kw["sampling"] = Sampling(args.temperature, args.top_k, args.top_p)
        kw["generator"] = torch.Generator(device=args.device).manual_seed(args.seed)
    return kw


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtcore.translate", description=__doc__.split("\n")[0])
    decoding_args(parser)
    args = parser.parse_args(argv)
    check_decoding_args(args)
    ckpt = load_checkpoint(args.model, device=args.device)
    lines = read_lines(sys.stdin.buffer)
    hyps = translate(ckpt.model, ckpt.tokenizer, lines, **decoding_kwargs(args)) if lines else []
    for h in hyps:
        sys.stdout.write(h.replace("\n", "\\n") + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
