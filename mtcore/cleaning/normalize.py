"""Normalisations that change text but drop nothing; each one's changed-row count is reported.

- `nfc`: Unicode NFC. Vietnamese is often typed with combining tone marks
  (e + U+0301); NFC makes one code point per letter, which the letter-share
  rules and the duplicate keys rely on.
- `invisible`: invisible format characters are removed (zero-width space, a BOM inside a
  file, soft hyphen, bidi marks; `mtcore.nmt.tokenizer.INVISIBLE`), as the tokenizer removes
  them: they carry no text, and the tokenizer made byte pieces of them.
- `whitespace`: every run of whitespace (newlines and Unicode spaces
  included) becomes one space; leading/trailing whitespace is stripped.
  Multi-line gettext help text becomes one line, which is what an MT model
  trains on.
- `accelerators`: a menu accelerator marker (GTK `_File`, Qt/KDE `&File`) is
  removed only when *both* sides carry exactly one, so that snake_case names,
  `R&D` or an entity like `&amp;` are left alone. An accelerator is a marker before
  a letter at the start of or inside a word; the `_` of a locale code (`pa_IN`,
  `ta_IN`, `sr_RS@latin`) joins a language and a country and never counts, so
  "_Punjabi (pa_IN)" → "Punjabi (pa_IN)", not "Punjabi (paIN)".

- `pseudo_context`: a message context written into the English itself, where the catalog has no
  msgctxt: glib's `Q_("Script|Cherokee")` and Wesnoth's `sgettext("female^lawful")` leave
  "Script|" and "female^" in the msgid, and the translation has none ("Tiếng Che-rô-khi"). The
  prefix is removed when the target carries no `|` (or `^`) at all: a `|`-context starts with a
  letter, has a capital, a space or an underscore and at most 4 words ("Color|", "recent menu
  label|"; "on|off" and the menu path "No Profiles defined in Edit|Posting Profiles" are text),
  a `^`-context is a word or words ("storm trident^"). It is looked for on the English side: the
  target of an X-en corpus (`english_side`). 644 pairs of the embedded corpus
  (fontforge, wesnoth, gramps) were trained with the context, or rejected by length rules for it.

Everything is vectorised with Arrow compute except the accelerator and pseudo-context steps, which
run in Python on the few rows whose both sides contain `_` or `&`, or whose source holds `|` or `^`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtcore.nmt.tokenizer import INVISIBLE

_WS_RE2 = r"[\s\x{0B}\p{Zs}\x{2028}\x{2029}\x{85}]+"  # RE2's \s leaves out \v, which TM exports use as a soft break
_INVISIBLE_RE2 = "[" + "".join(f"\\x{{{ord(c):04X}}}" for c in INVISIBLE) + "]"

# One accelerator: the marker followed by a letter/digit; `&&`/`__` are escaped literals.
_GTK = re.compile(r"(?<!_)_(?=[^\W_])")
# A locale code: language (2–3 lower-case letters), `_`, country (2 upper-case letters or 3 digits).
LOCALE_RE = re.compile(r"(?<![\w-])[a-z]{2,3}_(?:[A-Z]{2}|\d{3})(?:\.[\w-]+)?(?:@\w+)?(?![\w-])")
_KDE = re.compile(r"(?<!&)&(?=[^\W_])(?![A-Za-z][A-Za-z0-9]{1,8};|#\d+;|#[xX][0-9A-Fa-f]+;)")


# A context written into the msgid: `Context|text` (glib's Q_) or `context^text` (Wesnoth's sgettext).
_PIPE_CONTEXT = re.compile(r"^(?=[\w .-]*[A-Z _][\w .-]*\|)[A-Za-z][\w.-]*(?: [\w.-]+){0,3}\|(?=\S)")  # ≤ 4 words
_CARET_CONTEXT = re.compile(r"^[^\W\d][\w .-]{1,40}\^(?=\S)")


@dataclass(frozen=True)
class NormalizeConfig:
    nfc: bool = True
    invisible: bool = True
    whitespace: bool = True
    accelerators: bool = True
    pseudo_context: bool = True


def strip_pseudo_context(src: str, tgt: str) -> str:
    """`src` without a msgid-borne context prefix that the translation does not carry (see the module doc). Text
    that only looks so is left alone: a prefix whose words the translation keeps ("HTTP|HTTPS" / "HTTP hoặc HTTPS",
    "Press Ctrl^C" / "Nhấn Ctrl+C"), alternatives the translation writes with a slash ("Yes|No" / "Có/Không"), and a
    caret after a one-letter word (an exponent: "e^x"); each lost its first part before."""
    for marker, pattern in (("|", _PIPE_CONTEXT), ("^", _CARET_CONTEXT)):
        if marker in src and marker not in tgt:
            m = pattern.match(src)
            if not m:
                continue
            context, text = src[:m.end() - 1], src[m.end():]
            kept = set(re.findall(r"\w+", tgt.casefold())) - set(re.findall(r"\w+", text.casefold()))
            if any(w in kept for w in re.findall(r"\w+", context.casefold()) if len(w) > 1):
                return src
            if marker == "^" and len(context.split()[-1]) < 2:  # "e^x"; Wesnoth's "prefix_kilo^k" is a context
                return src
            if marker == "|" and "/" in tgt and "/" not in text and " " not in context.strip():
                return src
            return text
    return src


def _pseudo_contexts(src: pa.Array, tgt: pa.Array) -> tuple[pa.Array, np.ndarray]:
    cand = np.flatnonzero(pc.match_substring_regex(src, r"^[A-Za-z][\w .-]{1,40}[|^]\S").to_numpy(zero_copy_only=False))
    changed = np.zeros(len(src), dtype=bool)
    if len(cand) == 0:
        return src, changed
    out, targets = src.to_pylist(), tgt.to_pylist()
    for i in cand:
        fixed = strip_pseudo_context(out[i], targets[i])
        if fixed != out[i]:
            out[i], changed[i] = fixed, True
    return (pa.array(out, pa.string()) if changed.any() else src), changed


def _single_marker(text: str, pattern: re.Pattern, marker: str) -> int | None:
    """Where `text`'s one accelerator marker is; None when it has none or several (a locale code's `_` is none)."""
    if marker == "_":  # locale codes' `_` are not markers: mask them (same length, positions kept)
        text = LOCALE_RE.sub(lambda m: m.group(0).replace("_", "-"), text)
    if len(pattern.findall(text)) != 1 or text.count(marker) != 1:
        return None
    return text.index(marker)


def _joins_identifier(text: str, k: int) -> bool:
    """Inside a word and before a capital or digit a marker joins an identifier (America/Mexico_City, EXTENT_FL,
    GP_Layer, R&D): a mnemonic inside a word marks a lower-case letter (Vie_w, Dừ_ng)."""
    return k > 0 and text[k - 1].isalnum() and k + 1 < len(text) and (text[k + 1].isupper() or text[k + 1].isdigit())


def _strip_accelerator(src: str, tgt: str, pattern: re.Pattern, marker: str) -> tuple[str, str] | None:
    """Both sides without their single marker, or None when this is not an accelerator pair."""
    i, j = _single_marker(src, pattern, marker), _single_marker(tgt, pattern, marker)
    if i is None or j is None:
        return None
    # An identifier the translator copied as is (LC_ALL, file_name, AT&T) is not an accelerator.
    tok_s = re.search(r"[\w&]*\Z", src[:i]).group(0) + re.match(r"[\w&]*", src[i:]).group(0)
    tok_t = re.search(r"[\w&]*\Z", tgt[:j]).group(0) + re.match(r"[\w&]*", tgt[j:]).group(0)
    if tok_s == tok_t and i > 0 and (src[i - 1].isalnum()):
        return None
    if _joins_identifier(src, i) or _joins_identifier(tgt, j):
        return None
    return _without_marker(src, i), _without_marker(tgt, j)


def _without_marker(text: str, k: int) -> str:
    """`text` without its marker at `k`; a Chinese, Japanese or Korean catalog's "(_F)" group after the label goes
    whole ("文件(_F)" → "文件", not "文件(F)"), with the space before it."""
    if k > 0 and k + 2 < len(text) and text[k - 1] in "(（" and text[k + 2] in ")）":
        head = text[:k - 1]
        return (head[:-1] if head.endswith(" ") else head) + text[k + 3:]
    return text[:k] + text[k + 1:]


def without_accelerator(text: str) -> str:
    """One text without its menu accelerator marker ("S_tandby Now" -> "Standby Now", "&Open" -> "Open"): what a
    sentence encoder reads, since the marker's place differs between a message and its translation ("S_tandby Now" /
    "_Vào chế độ chờ") and splits a word into other pieces. `normalize_table` strips a pair's markers only when both
    sides have one; an encoder reads one side, so this keeps the rest of that rule: locale codes, identifiers
    (EXTENT_FL, R&D), entities, escaped `__`/`&&` and texts with several markers are left alone."""
    for marker, pattern in (("_", _GTK), ("&", _KDE)):
        if marker in text:
            k = _single_marker(text, pattern, marker)
            if k is not None and not _joins_identifier(text, k):
                text = _without_marker(text, k)
    return text


def _accelerators(src: pa.Array, tgt: pa.Array) -> tuple[pa.Array, pa.Array, np.ndarray]:
    changed = np.zeros(len(src), dtype=bool)
    out_s, out_t = None, None
    for marker, pattern in (("_", _GTK), ("&", _KDE)):
        cand = pc.and_(pc.match_substring(src, marker), pc.match_substring(tgt, marker))
        idx = np.flatnonzero(cand.to_numpy(zero_copy_only=False))
        if len(idx) == 0:
            continue
        if out_s is None:
            out_s, out_t = src.to_pylist(), tgt.to_pylist()
        for i in idx:
            fixed = _strip_accelerator(out_s[i], out_t[i], pattern, marker)
            if fixed is not None:
                out_s[i], out_t[i] = fixed
                changed[i] = True
    if out_s is None:
        return src, tgt, changed
    return pa.array(out_s, pa.string()), pa.array(out_t, pa.string()), changed


def _nfc(arr: pa.Array) -> pa.Array:
    """Unicode NFC. Not `pc.utf8_normalize`: in pyarrow 25 its "NFC" returns decomposed text.

    Only rows with a code point at or above U+0300 can change (nothing below composes or
    decomposes), so Python's `unicodedata` sees only those.
    """
    cand = np.flatnonzero(pc.fill_null(pc.match_substring_regex(arr, r"[^\x{00}-\x{2FF}]"), False).to_numpy(zero_copy_only=False))
    if len(cand) == 0:
        return arr
    values = arr.take(pa.array(cand)).to_pylist()
    fixed = [(i, unicodedata.normalize("NFC", v)) for i, v in zip(cand, values) if not unicodedata.is_normalized("NFC", v)]
    if not fixed:
        return arr
    out = arr.to_pylist()
    for i, v in fixed:
        out[i] = v
    return pa.array(out, pa.string())


def _changed(before_s, before_t, after_s, after_t) -> np.ndarray:
    diff = pc.or_(pc.not_equal(before_s, after_s), pc.not_equal(before_t, after_t))
    return pc.fill_null(diff, False).to_numpy(zero_copy_only=False).astype(bool)


def normalize_table(table: pa.Table, cfg: NormalizeConfig = NormalizeConfig(), *,
                    english_side: str = "src") -> tuple[pa.Table, dict[str, np.ndarray]]:
    """`table` with normalised `src`/`tgt`, and per normalisation a mask of the rows it changed. `english_side`:
    the side that holds a catalog's msgid (`tgt` in a vi-en corpus), where a pseudo context is written."""
    src = pc.fill_null(table.column("src").combine_chunks().cast(pa.string()), "")
    tgt = pc.fill_null(table.column("tgt").combine_chunks().cast(pa.string()), "")
    counts: dict[str, np.ndarray] = {}
    if cfg.nfc:
        s2, t2 = _nfc(src), _nfc(tgt)
        counts["nfc"] = _changed(src, tgt, s2, t2)
        src, tgt = s2, t2
    if cfg.invisible:
        s2, t2 = (pc.replace_substring_regex(a, _INVISIBLE_RE2, "") for a in (src, tgt))
        counts["invisible"] = _changed(src, tgt, s2, t2)
        src, tgt = s2, t2
    if cfg.whitespace:
        s2 = pc.utf8_trim_whitespace(pc.replace_substring_regex(src, _WS_RE2, " "))
        t2 = pc.utf8_trim_whitespace(pc.replace_substring_regex(tgt, _WS_RE2, " "))
        counts["whitespace"] = _changed(src, tgt, s2, t2)
        src, tgt = s2, t2
    if cfg.pseudo_context:  # before the accelerators, which count the markers of the text alone
        if english_side == "tgt":
            tgt, counts["pseudo_context"] = _pseudo_contexts(tgt, src)
        else:
            src, counts["pseudo_context"] = _pseudo_contexts(src, tgt)
    if cfg.accelerators:
        src, tgt, counts["accelerators"] = _accelerators(src, tgt)
    table = table.set_column(table.schema.get_field_index("src"), "src", src)
    table = table.set_column(table.schema.get_field_index("tgt"), "tgt", tgt)
    return table, counts
