"""Noise-injection benchmark for the cleaner, beside OpusFilter's usual filter set on the same input.

Clean held-out pairs (data/test.parquet, else data/dev.parquet, else — before the
embedded corpus exists — this machine's Vietnamese gettext catalogs) get known
noise at known rates:

  misaligned      targets shuffled among the chosen rows (the alignment filter's job, issue 4;
                  reported, not a goal here)
  copy            target = source (rows whose source has ≥ 3 words: shorter copies are
                  legitimately kept names, see Untranslated)
  third_language  target = the French/German/Spanish translation of the same msgid from this
                  machine's /usr/share/locale/{fr,de,es} catalogs (real text; ≥ 3 words)
  truncated       target cut to 30–60 % of its words (targets of ≥ 6 words)
  placeholder     one format specifier in the target dropped, retyped (%s→%d) or broken (% s)
  mojibake        target's UTF-8 bytes read as cp1252 (Latin-1 where cp1252 has no character)
  duplicate       an untouched pair inserted again under a later id: half exact, half
                  case/punctuation/spacing variants

Rows are first de-duplicated (lower-cased, punctuation-free pairs) so that the untouched rows are distinct.
Recall per type = share of its rows rejected (any reason); precision per type = share
of the rows rejected *for that type's reasons* that are noise; false rejects = share of
untouched rows rejected. TestOverlap is switched off (the input *is* the held-out set).

    python benchmarks/clean_noise.py [--n 4000] [--seed 0]
"""

from __future__ import annotations

import argparse
import gettext
import glob
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import opusfilter_baseline as ob  # noqa: E402

from mtcore.cleaning import build_config, clean_table  # noqa: E402
from mtcore.cleaning.config import DEFAULT_RULES  # noqa: E402
from mtcore.data.paths import DEV, TEST  # noqa: E402

TYPES = ["misaligned", "copy", "third_language", "truncated", "placeholder", "mojibake", "duplicate"]
RATE = 0.05  # of the base rows, per type
# Which of our reasons / OpusFilter's filters speak for which noise type (for per-type precision).
OUR_REASONS = {
    "copy": {"untranslated"},
    "third_language": {"wrong_language"},
    "truncated": {"length_ratio", "punctuation_mismatch"},
    "placeholder": {"placeholder_mismatch"},
    "mojibake": {"encoding_noise"},
    "duplicate": {"duplicate", "near_duplicate"},
    "misaligned": {"length_ratio", "number_mismatch"},
}
OPUS_REASONS = {
    "copy": {"LanguageIDFilter"},
    "third_language": {"LanguageIDFilter", "CharacterScoreFilter"},
    "truncated": {"LengthRatioFilter", "TerminalPunctuationFilter"},
    "placeholder": {"NonZeroNumeralsFilter", "AlphabetRatioFilter"},
    "mojibake": {"CharacterScoreFilter", "AlphabetRatioFilter", "LanguageIDFilter"},
    "duplicate": {"remove_duplicates"},
    "misaligned": {"LengthRatioFilter", "NonZeroNumeralsFilter"},
}


def _mo_catalog(path: str) -> dict[str, str]:
    try:
        with open(path, "rb") as f:
            cat = gettext.GNUTranslations(f)._catalog
    except Exception:  # a catalog Python cannot read is skipped
        return {}
    out = {}
    for k, v in cat.items():
        if isinstance(k, tuple):
            if k[1] != 0:
                continue
            k = k[0]
        if k and v:
            out[k.split("\x04", 1)[-1]] = v
    return out


def machine_pairs() -> pd.DataFrame:
    rows = []
    for p in sorted(glob.glob("/usr/share/locale/vi/LC_MESSAGES/*.mo")):
        name = os.path.basename(p)
        for i, (k, v) in enumerate(sorted(_mo_catalog(p).items())):
            rows.append((k, v, name, f"{name}:{i:06d}"))
    return pd.DataFrame(rows, columns=["src", "tgt", "origin", "id"])


def third_language_index() -> dict[str, list[str]]:
    """msgid → its French/German/Spanish translations on this machine (real third-language text)."""
    index: dict[str, list[str]] = {}
    for lang in ("fr", "de", "es"):
        for p in sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo")):
            for k, v in _mo_catalog(p).items():
                index.setdefault(" ".join(k.split()), []).append(v)
    return index


def mojibake(text: str) -> str:
    out = []
    for b in text.encode("utf-8"):
        try:
            out.append(bytes([b]).decode("cp1252"))
        except UnicodeDecodeError:
            out.append(chr(b))
    return "".join(out)


_PH = re.compile(r"%(?:\d+\$)?[-+#0]*\d*(?:\.\d+)?(?:l|ll|h|z)?[diouxXfFeEgGcs]|\{\w*\}|<(/?)(b|i|a|span)>")


def break_placeholder(tgt: str, rng: random.Random) -> str | None:
    ms = list(_PH.finditer(tgt))
    if not ms:
        return None
    m = rng.choice(ms)
    tok = m.group(0)
    how = rng.choice(["drop", "retype", "break"])
    if how == "drop":
        new = ""
    elif how == "retype" and tok.startswith("%"):
        new = tok[:-1] + ("d" if tok[-1] != "d" else "s")
    elif tok.startswith("%"):
        new = "% " + tok[1:]
    elif tok.startswith("{"):
        new = "{" + tok[1:-1] + " }" if len(tok) > 2 else "{ }"
    else:
        new = tok.replace("<", "< ")
    return tgt[: m.start()] + new + tgt[m.end() :]


def build_noisy(base: pd.DataFrame, seed: int) -> pd.DataFrame:
    rng = random.Random(seed)
    base = base.copy()
    base["noise"] = ""
    n_type = int(RATE * len(base))
    third = third_language_index()
    words = base.src.str.split().str.len()
    twords = base.tgt.str.split().str.len()
    free = set(range(len(base)))

    def pick(cands, k):
        cands = [i for i in cands if i in free]
        rng.shuffle(cands)
        chosen = cands[:k]
        free.difference_update(chosen)
        return chosen

    idx = pick(list(range(len(base))), n_type)  # misaligned: a derangement of their targets
    tg = base.tgt.to_numpy(object)
    perm = idx[1:] + idx[:1]
    for i, j in zip(idx, perm):
        base.at[i, "tgt"] = tg[j]
        base.at[i, "noise"] = "misaligned"
    for i in pick([i for i in range(len(base)) if words[i] >= 3], n_type):
        base.at[i, "tgt"], base.at[i, "noise"] = base.at[i, "src"], "copy"
    cands = [i for i in range(len(base)) if words[i] >= 3 and " ".join(base.at[i, "src"].split()) in third]
    for i in pick(cands, n_type):
        options = [t for t in third[" ".join(base.at[i, "src"].split())] if len(t.split()) >= 3] or third[" ".join(base.at[i, "src"].split())]
        base.at[i, "tgt"], base.at[i, "noise"] = rng.choice(options), "third_language"
    for i in pick([i for i in range(len(base)) if twords[i] >= 6], n_type):
        w = base.at[i, "tgt"].split()
        base.at[i, "tgt"], base.at[i, "noise"] = " ".join(w[: max(1, int(len(w) * rng.uniform(0.3, 0.6)))]), "truncated"
    cands = [i for i in range(len(base)) if _PH.search(base.at[i, "tgt"] or "")]
    for i in pick(cands, n_type):
        broken = break_placeholder(base.at[i, "tgt"], rng)
        if broken is not None and broken != base.at[i, "tgt"]:
            base.at[i, "tgt"], base.at[i, "noise"] = broken, "placeholder"
    for i in pick([i for i in range(len(base)) if re.search(r"[^\x00-\x7f]", base.at[i, "tgt"])], n_type):
        base.at[i, "tgt"], base.at[i, "noise"] = mojibake(base.at[i, "tgt"]), "mojibake"
    dups = []
    for k, i in enumerate(rng.sample(sorted(free), n_type)):
        s, t = base.at[i, "src"], base.at[i, "tgt"]
        if k % 2:
            s, t = rng.choice([(s.upper(), t.upper()), (s + " .", t + " ."), ("  " + s, t + "  ")])
        dups.append({"src": s, "tgt": t, "origin": "dup", "id": f"~dup:{k:06d}", "noise": "duplicate"})
    return pd.concat([base, pd.DataFrame(dups)], ignore_index=True)


def load_base(n: int, seed: int) -> tuple[pd.DataFrame, str]:
    for path in (TEST, DEV):
        if Path(path).exists():
            df = pd.read_parquet(path, columns=["src", "tgt", "origin", "id"])
            name = str(path)
            break
    else:
        df, name = machine_pairs(), "this machine's /usr/share/locale/vi gettext catalogs (data/test.parquet absent)"
    df = df[(df.src.str.strip() != "") & (df.tgt.str.strip() != "")]
    norm = lambda s: s.str.lower().str.replace(r"[\W_]+", " ", regex=True).str.strip()  # noqa: E731
    key = norm(df.src) + "\t" + norm(df.tgt)
    df = df[~key.duplicated()]
    if len(df) > n:
        df = df.sample(n, random_state=seed)
    return df.sort_values("id").reset_index(drop=True), name


def score(reject_reason: pd.Series, noise: pd.Series, reasons_for: dict) -> dict:
    rejected = reject_reason != ""
    out = {}
    for t in TYPES:
        sel = noise == t
        by_reason = reject_reason.isin(reasons_for[t])
        out[t] = {
            "n": int(sel.sum()),
            "recall": float(rejected[sel].mean()) if sel.any() else float("nan"),
            "precision": float((noise[by_reason] != "").mean()) if by_reason.any() else float("nan"),
        }
    clean = noise == ""
    out["false_reject"] = float(rejected[clean].mean())
    out["overall_precision"] = float((noise[rejected] != "").mean()) if rejected.any() else float("nan")
    out["clean_rejected_by"] = dict(Counter(reject_reason[clean & rejected]).most_common(8))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4000, help="held-out pairs to start from")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()

    base, base_name = load_base(args.n, args.seed)
    noisy = build_noisy(base, args.seed).sort_values("id", kind="stable").reset_index(drop=True)
    print(f"base: {len(base):,} pairs from {base_name}; noisy input: {len(noisy):,} pairs")
    print("injected:", dict(Counter(noisy.noise[noisy.noise != ""])))

    # ours: default rules, TestOverlap off (the input is the held-out set itself)
    import yaml

    cfg_dict = yaml.safe_load(DEFAULT_RULES.read_text(encoding="utf-8"))
    cfg_dict["rules"] = [r for r in cfg_dict["rules"] if "TestOverlap" not in r]
    cfg = build_config(cfg_dict, source="default_rules.yaml without TestOverlap")
    table = pa.Table.from_pandas(noisy[["src", "tgt", "origin", "id"]], preserve_index=False)
    t0 = time.perf_counter()
    kept, rejects, report = clean_table(table, cfg)
    ours_s = time.perf_counter() - t0
    reason_by_id = dict(zip(rejects.column("id").to_pylist(), rejects.column("reason").to_pylist()))
    ours = noisy.id.map(reason_by_id).fillna("")

    # OpusFilter, same input (one line per pair)
    py = ob.ensure_venv()
    with tempfile.TemporaryDirectory(dir=ob.WORK) as tmp:
        tmp = Path(tmp)
        flat = lambda s: " ".join(s.split())  # noqa: E731 - line-based files cannot hold newlines
        (tmp / "in.en").write_text("".join(flat(s) + "\n" for s in noisy.src), encoding="utf-8")
        (tmp / "in.vi").write_text("".join(flat(s) + "\n" for s in noisy.tgt), encoding="utf-8")
        t0 = time.perf_counter()
        subprocess.run([str(py), ob.__file__, "decisions", str(tmp / "in.en"), str(tmp / "in.vi"), str(tmp / "out.json")], check=True)
        opus_s = time.perf_counter() - t0
        opus = pd.Series(json.loads((tmp / "out.json").read_text(encoding="utf-8")))

    a, b = score(ours, noisy.noise, OUR_REASONS), score(opus, noisy.noise, OPUS_REASONS)
    print(f"\nOpusFilter {ob.opusfilter_version()} (usual filter set + remove_duplicates) vs mtcore.cleaning (default rules)")
    print(f"{'noise type':<16}{'n':>6}  {'recall ours':>11} {'OpusF':>7} {'ratio':>6}   {'prec ours':>9} {'OpusF':>7}")
    for t in TYPES:
        ra, rb = a[t]["recall"], b[t]["recall"]
        ratio = ra / rb if rb else float("inf")
        print(f"{t:<16}{a[t]['n']:>6}  {ra:>11.3f} {rb:>7.3f} {ratio:>6.2f}   {a[t]['precision']:>9.3f} {b[t]['precision']:>7.3f}")
    print(f"{'false rejects':<22}  {a['false_reject']:>11.3%} {b['false_reject']:>7.2%}   (untouched pairs rejected)")
    print(f"{'overall precision':<22}  {a['overall_precision']:>11.3f} {b['overall_precision']:>7.3f}")
    print(f"untouched pairs rejected by (ours): {a['clean_rejected_by']}")
    print(f"untouched pairs rejected by (OpusFilter): {b['clean_rejected_by']}")
    print(f"time: ours {ours_s:.1f}s in process, OpusFilter {opus_s:.1f}s (scoring only, incl. start-up)")
    if args.json:
        Path(args.json).write_text(json.dumps({"base": base_name, "ours": a, "opusfilter": b}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
