"""Format specifiers and markup that a translation must carry over unchanged.

A translated message is only usable if it keeps the *machine-readable* parts of
its source: printf conversions (`%s`, `%1$d`, `%-10.3f`, `%(name)s`, Qt's
`%1`), brace fields (`{0}`, `{name}`, `{}` — Python `str.format`, .NET, ICU),
HTML/Pango markup tags (`<b>…</b>`, `<span …>`, `<br/>`), character entities
(`&amp;`, `&#169;`) and escaped control sequences written out literally (`\\n`,
`\\t`). `extract()` returns them as a canonical multiset, so that comparing
source and target is a multiset comparison (order may change in a translation).

Canonical forms are chosen so that what translators legitimately change does
not count as a mismatch (msgfmt --check-format sees it the same way):

- printf: positions (`%2$s` → `%s`), flags, width and precision are dropped;
  the length modifier and conversion are kept, `%i` counts as `%d`, a `*`
  width/precision is kept because it consumes an argument. `%%` is kept.
  The space flag is not recognised, so prose such as "50% of" / "50% số" is
  not mistaken for `% o` / `% s`.
- tags: the tag name and whether it opens, closes or is self-closing; attribute
  values (a translated `title=`) do not count. Only known HTML/Pango tag names
  count, so usage text such as `<file>` → `<tập-tin>` is prose, not markup.
- brace fields: the field name or index with its conversion/format spec.

This module is shared by cleaning and back-translation filtering.
"""

from __future__ import annotations

import html
import re
from collections import Counter

# printf: %[pos$][flags][width][.precision][length]conversion, or Python's %(name)[flags]conversion, or %%
_PRINTF = (
    r"%(?:(?P<pos>\d+\$)|\((?P<pyname>[A-Za-z_][A-Za-z0-9_]*)\))?"
    r"(?P<flags>[-+#0']*)(?P<width>\d+|\*(?:\d+\$)?)?(?:\.(?P<prec>\d*|\*(?:\d+\$)?))?"
    r"(?P<len>hh|h|ll|l|L|q|j|z|Z|t|I64|I32)?(?P<conv>[diouxXeEfFgGaAcspn])"
    r"|%(?P<pct>%)"
    r"|%(?P<qt>[1-9]\d?)(?![\d$])"  # Qt/KDE positional arguments %1 … %99
)
_BRACE = r"\{(?P<field>\d+|[A-Za-z_][A-Za-z0-9_.]*)?(?P<bconv>![rsa])?(?::(?P<spec>[^{}\s]*))?\}"
TAG_NAMES = frozenset(
    "a abbr b big blockquote br code dd div dl dt em h1 h2 h3 h4 h5 h6 hr i img kbd li ol p pre q s "
    "samp small span strike strong sub sup table tbody td th tr tt u ul var markup".split()
)
_TAG = (
    r"<(?P<close>/)?(?P<tag>(?i:" + "|".join(sorted(TAG_NAMES, key=len, reverse=True)) + r"))"
    r"(?P<attrs>\s[^<>]*?)?\s*(?P<selfclose>/)?>"
)
_ENTITY = r"&(?P<entity>[A-Za-z][A-Za-z0-9]{1,8}|#\d{1,7}|#[xX][0-9A-Fa-f]{1,6});"
_ESCAPE = r"\\(?P<esc>[ntr])"

PLACEHOLDER_RE = re.compile("|".join(f"(?:{p})" for p in (_PRINTF, _BRACE, _TAG, _ENTITY, _ESCAPE)))
# The same in RE2 for Arrow's vectorised kernels (no named groups or lookaround): an approximation, used to
# remove placeholders before counting words, never to compare them.
PLACEHOLDER_RE2 = (r"%(?:\d+\$|\([A-Za-z_][A-Za-z0-9_]*\))?[-+#0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?"
                   r"[diouxXeEfFgGaAcspn]|\{[^{}\s]*\}|</?[A-Za-z][^<>]*>|&[A-Za-z#][A-Za-z0-9]*;")
# Characters without which no placeholder can occur: a cheap vectorised pre-filter.
TRIGGER_CHARS = "%{<&\\"
TRIGGER_RE2 = r"[%{<&\\]"


def _canonical(m: re.Match) -> str:
    g = m.groupdict()
    if g["conv"]:
        conv = "d" if g["conv"] == "i" else g["conv"]
        star = "*" if (g["width"] or "").startswith("*") else ""
        star += ".*" if (g["prec"] or "").startswith("*") else ""
        name = f"({g['pyname']})" if g["pyname"] else ""
        return f"%{name}{star}{g['len'] or ''}{conv}"
    if g["pct"]:
        return "%%"
    if g["qt"]:
        return f"%{g['qt']}"
    if g["tag"] is not None:
        tag = g["tag"].lower()
        return f"</{tag}>" if g["close"] else (f"<{tag}/>" if g["selfclose"] else f"<{tag}>")
    if g["entity"]:
        return f"&{g['entity']};"
    if g["esc"]:
        return f"\\{g['esc']}"
    # brace field
    return "{" + (g["field"] or "") + (g["bconv"] or "") + (f":{g['spec']}" if g["spec"] else "") + "}"


def extract(text: str) -> list[str]:
    """The canonical placeholders of `text`, sorted (a multiset as a list)."""
    if not text or not any(c in text for c in TRIGGER_CHARS):
        return []
    out = []
    for m in PLACEHOLDER_RE.finditer(text):
        out.append(_canonical(m))
        if m.group("attrs"):  # <a href="%s">: what is inside a tag counts too
            out.extend(extract(m.group("attrs")))
    out.sort()
    return out


def strip(text: str) -> str:
    """`text` with its placeholders replaced by a space (for number and word checks)."""
    if not text or not any(c in text for c in TRIGGER_CHARS):
        return text
    return PLACEHOLDER_RE.sub(" ", text)


def mismatch(src: str, tgt: str) -> tuple[list[str], list[str]]:
    """(missing from target, extra in target); both empty when the multisets agree. An entity HTML knows (`&#215;`,
    `&quot;`, `&amp;`) is a character of the text, encoded: the translation may write it out, use another or none
    ("Tom &amp; Jerry" → "Tom và Jerry"), so it is not compared, unless the other side writes `&`, `<` or `>` bare
    where the text was escaped (`&amp;` → `&`: the markup no longer parses). An unknown `&name;` is compared."""
    a, b = Counter(extract(src)), Counter(extract(tgt))
    missing, extra = a - b, b - a
    for unmatched, other in ((missing, tgt), (extra, src)):
        text = PLACEHOLDER_RE.sub(" ", other)  # its tags and entities gone: what is left is written bare
        for token in [t for t in unmatched if t.startswith("&") and html.unescape(t) != t]:
            if not (html.unescape(token) in "&<>" and html.unescape(token) in text):
                del unmatched[token]
    return sorted((+missing).elements()), sorted((+extra).elements())
