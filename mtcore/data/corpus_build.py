"""Build the embedded corpus in ``data/`` from Debian packages.

data/SOURCES.md: every Debian package with a Vietnamese
gettext catalog holds human translations of English messages. This module
downloads the packages (``apt-get download``, never installing), unpacks them
(``dpkg-deb -x``) into a temporary folder, reads their ``vi`` catalogs into
pairs with provenance, and Vietnamese documentation into monolingual
sentences. It then makes the splits:

* dev and test are whole held-out catalogs (of different packages), so the
  evaluation sets are not near-copies of training messages; they are
  deduplicated against train by a normalised source and stripped of obvious
  junk only;
* another slice of held-out catalogs gives its Vietnamese side to the
  monolingual corpus (for back-translation), together with documentation
  prose;
* everything else is the raw training corpus, deduplicated on exact
  (src, tgt) but otherwise left raw: cleaning is a pipeline stage.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import shutil
import subprocess
import tempfile
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from mtcore.data.catalogs import TABLE_SCHEMA, CatalogError, catalog_table
from mtcore.data.corpus import write_parquet
from mtcore.data.paths import DATA_DIR

DEFAULT_CACHE = Path.home() / ".cache" / "mtcore" / "debs"  # outside the repo: debs are ~1 GB
LOCAL_LOCALE_DIR = Path("/usr/share/locale/vi/LC_MESSAGES")
VI_LOCALES = ("vi", "vi_VN")
MONO_SCHEMA = pa.schema([("text", pa.string()), ("origin", pa.string()), ("id", pa.string())])
# English/Vietnamese document pair kept for document alignment (a later issue).
DOC_PAIRS = {"maint-guide": ("maint-guide", "maint-guide-vi")}
EN_DOC_PACKAGES = frozenset(en for en, _ in DOC_PAIRS.values())  # read for English pages, not vi


@dataclass
class BuildConfig:
    """What to build and where; the defaults make the shipped ``data/``."""

    packages_file: Path = DATA_DIR / "packages.txt"
    output: Path = DATA_DIR
    cache: Path = DEFAULT_CACHE
    seed: int = 13
    dev_pairs: int = 2000  # target size after cleaning and deduplication
    test_pairs: int = 2000
    mono_catalog_pairs: int = 3000  # Vietnamese sides of held-out catalogs
    heldout_min: int = 150  # "mid-sized": a held-out catalog has this many pairs ...
    heldout_max: int = 1200  # ... up to this many, so several catalogs make a split
    mono_min_words: int = 3
    mono_max_words: int = 80
    include_local: bool = True  # also read this machine's own vi catalogs


@dataclass
class PackageResult:
    """What one package gave, for the summary and SOURCES.md."""

    name: str
    status: str  # "used" or "skipped"
    reason: str = ""
    version: str = ""
    license: str = ""
    catalogs: dict[str, int] = field(default_factory=dict)  # origin -> pairs read
    docs: dict[str, int] = field(default_factory=dict)  # origin -> sentences read


# ---------------------------------------------------------------------------
# package list and Debian tools


def read_package_list(path: Path) -> list[str]:
    """Package names, one a line; ``#`` starts a comment; order kept, duplicates dropped."""
    names = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        name = line.split("#", 1)[0].strip()
        if name and name not in names:
            names.append(name)
    return names


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a Debian tool, capturing its output for error messages."""
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def download(package: str, cache: Path) -> tuple[Path | None, str]:
    """The package's .deb in ``cache`` (fetched once), or (None, why not)."""
    cache.mkdir(parents=True, exist_ok=True)
    cached = sorted(cache.glob(f"{package}_*.deb"))
    if cached:
        return cached[-1], ""
    result = _run(["apt-get", "download", "-q", package], cwd=cache)
    cached = sorted(cache.glob(f"{package}_*.deb"))
    if result.returncode != 0 or not cached:
        lines = (result.stderr or result.stdout).strip().splitlines()
        errors = [l for l in lines if l.startswith("E:")]
        return None, (errors or lines or ["apt-get download failed"])[-1]
    return cached[-1], ""


def source_packages(packages: list[str]) -> dict[str, str]:
    """The source package each binary package is built from, by one ``apt-cache show`` (a package apt does not
    know, or one without a ``Source:`` field, is its own source)."""
    found: dict[str, str] = {}
    package = None
    for line in _run(["apt-cache", "show", "--no-all-versions", *packages]).stdout.splitlines():
        if line.startswith("Package:"):
            package = line.split()[1]
        elif line.startswith("Source:") and package:
            found.setdefault(package, line.split()[1])
    return {p: found.get(p, p) for p in packages}


def source_vi_catalogs(source: str, cache: Path) -> tuple[list[Path], str]:
    """The Vietnamese .po files (`is_vi_po`) of a source package's tarballs (``apt-get source --download-only``,
    needing a ``deb-src`` line), unpacked under ``cache/source``, or ([], why not). The tarballs are deleted."""
    into = cache / source
    done = cache / f"{source}.done"
    if not done.exists():
        work = cache / f".{source}.download"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        result = _run(["apt-get", "source", "--download-only", "-qq", source], cwd=work)
        tarballs = [t for t in work.glob("*.tar.*") if not t.name.endswith(".asc")]
        if not tarballs:
            shutil.rmtree(work, ignore_errors=True)
            lines = (result.stderr or result.stdout).strip().splitlines()
            return [], ([l for l in lines if l.startswith("E:")] or lines or ["no tarball"])[0]  # the first names the file
        into.mkdir(parents=True, exist_ok=True)
        for tarball in tarballs:  # a debian.tar.xz that failed to download still leaves the upstream one
            _run(["tar", "xf", str(tarball), "-C", str(into), "--wildcards", "--no-anchored", "*vi.po", "*/vi/*.po"])
        shutil.rmtree(work, ignore_errors=True)
        done.touch()
    return sorted(p for p in into.rglob("*.po") if p.is_file() and is_vi_po(p)), ""


def is_vi_po(path: Path) -> bool:
    """A Vietnamese .po: `vi.po` (gettext's po/ folder, debconf's debian/po/), `DOMAIN/vi.po`, `vi/DOMAIN.po` (KDE's
    layout); not `okular_dvi.po` in another language's folder."""
    return path.suffix == ".po" and (path.name == "vi.po" or path.name.endswith((".vi.po", "-vi.po", "_vi.po"))
                                     or path.parent.name == "vi")


def deb_field(deb: Path, name: str) -> str:
    """One control field of a .deb (e.g. ``Version``)."""
    return _run(["dpkg-deb", "-f", str(deb), name]).stdout.strip()


def extract(deb: Path, into: Path) -> None:
    """Unpack a .deb's files without installing it."""
    result = _run(["dpkg-deb", "-x", str(deb), str(into)])
    if result.returncode != 0:
        raise RuntimeError(f"{deb}: dpkg-deb -x failed: {result.stderr.strip()}")


def local_owner(path: Path) -> str:
    """The installed package that owns ``path`` (``dpkg -S``), or 'unknown'."""
    result = _run(["dpkg", "-S", str(path)])
    if result.returncode != 0 or ":" not in result.stdout:
        return "unknown"
    return result.stdout.split(":", 1)[0].split(",")[0].strip()


# ---------------------------------------------------------------------------
# what a package holds


def find_vi_catalogs(root: Path) -> list[Path]:
    """Every ``*/vi/LC_MESSAGES/*.mo`` (and ``vi_VN``) under ``root``, sorted.

    Symlinks are skipped: they point at another file of the same package (or
    at an absolute path that only exists once installed).
    """
    found = [
        p
        for p in root.rglob("*.mo")
        if p.parent.name == "LC_MESSAGES" and p.parent.parent.name in VI_LOCALES and not p.is_symlink()
    ]
    return sorted(found)


def catalog_origins(package: str, catalogs: list[Path]) -> dict[str, Path]:
    """``"<package>/<catalog>"`` for each catalog; the locale is added if a name repeats."""
    names = Counter(p.stem for p in catalogs)
    origins = {}
    for path in catalogs:
        name = path.stem if names[path.stem] == 1 else f"{path.stem}@{path.parent.parent.name}"
        if f"{package}/{name}" in origins:  # same name and locale in two folders
            name = f"{name}@{hashlib.sha1(str(path).encode()).hexdigest()[:6]}"
        origins[f"{package}/{name}"] = path
    return origins


def read_license(root: Path, package: str) -> str:
    """Short licence names from a DEP-5 ``copyright`` file, else a pointer to it.

    Many packages' doc folder is a symlink to another package's, which a
    single unpacked .deb does not contain; those also say "see copyright file".
    """
    path = root / "usr" / "share" / "doc" / package / "copyright"
    if not path.is_file() or path.is_symlink():
        return "see copyright file"
    text = path.read_text(encoding="utf-8", errors="replace")
    names = []
    for match in re.finditer(r"^License:[ \t]*(\S[^\n]*)$", text, flags=re.MULTILINE):
        name = match.group(1).strip()
        if name and name not in names:
            names.append(name)
    return ", ".join(names) if names else "see copyright file"


def find_docs(root: Path, lang: str) -> list[Path]:
    """Documentation pages in ``lang``: HTML under a ``<lang>`` folder or named ``*.<lang>.html``, and man pages."""
    pages = []
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        parts = path.relative_to(root).parts
        is_html = path.suffix in (".html", ".htm") and (lang in parts[:-1] or path.name.endswith(f".{lang}.html"))
        is_man = "man" in parts and lang in parts and re.search(r"\.\d\w*(\.gz)?$", path.name)
        if is_html or is_man:
            pages.append(path)
    return pages


# ---------------------------------------------------------------------------
# documentation text


class _HTMLText(HTMLParser):
    """Collects the paragraphs of an HTML page, leaving out code and navigation."""

    SKIP = {"script", "style", "pre", "code", "header", "nav", "aside", "head", "kbd", "samp"}
    BLOCK = {"p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "td", "th", "dt", "dd",
             "br", "tr", "table", "blockquote", "section", "title", "ul", "ol", "dl"}  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._current: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in self.SKIP:
            self._skip += 1
        elif tag in self.BLOCK:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in self.BLOCK:
            self._flush()

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self._current.append(data)

    def _flush(self) -> None:
        text = " ".join("".join(self._current).split())
        if text:
            self.paragraphs.append(text)
        self._current = []


def html_paragraphs(html: str) -> list[str]:
    """The visible prose of an HTML page, one string per block element."""
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    parser._flush()
    return parser.paragraphs


_TROFF_TEXT = {"B", "I", "BR", "IR", "RB", "BI", "IB", "RI", "SM", "SB"}
_TROFF_ESCAPES = [
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),  # font changes
    (re.compile(r"\\\(em|\\\(en"), "—"),
    (re.compile(r"\\\((lq|rq|oq|cq)"), '"'),
    (re.compile(r"\\\[[^\]]*\]|\\\(..|\\\*\(..|\\\*."), ""),  # other named glyphs and strings
    (re.compile(r"\\[-e]"), lambda m: "-" if m.group(0) == "\\-" else "\\"),
    (re.compile(r"\\[,/&|^ ]"), lambda m: " " if m.group(0) == "\\ " else ""),
]


def man_paragraphs(troff: str) -> list[str]:
    """Prose of a man page: macro lines end paragraphs, font macros (``.B``) keep their words.

    A small subset of ``man(7)``, enough for translated man pages; tables
    and other preprocessors' output come out as noise that the sentence
    filters (length, Vietnamese letters) then drop.
    """
    paragraphs, current = [], []
    for raw in troff.splitlines():
        if raw.startswith((".\\\"", "'\\\"", '.\\"')):
            continue
        if raw.startswith((".", "'")):
            macro, _, args = raw[1:].strip().partition(" ")
            if macro in _TROFF_TEXT:
                current.append(args.replace('"', ""))
                continue
            paragraphs.append(" ".join(current))  # any other macro (.PP, .SH, .TP...) ends a paragraph
            current = []
            continue
        current.append(raw)
    paragraphs.append(" ".join(current))
    out = []
    for text in paragraphs:
        for pattern, repl in _TROFF_ESCAPES:
            text = pattern.sub(repl, text)
        text = " ".join(text.split())
        if text:
            out.append(text)
    return out


def document_paragraphs(path: Path) -> list[str]:
    """Paragraphs of an HTML page or a (gzipped) man page."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    return html_paragraphs(text) if path.suffix in (".html", ".htm") else man_paragraphs(text)


# ---------------------------------------------------------------------------
# sentences

# Words after which a full stop does not end a sentence (lower-cased, no dot).
ABBREVIATIONS = frozenset(
    "e.g i.e etc vs cf al fig no nos vol p pp ch sec mr mrs ms dr prof st jr sr inc ltd co corp "
    "approx ca dept est min max resp viz "  # English
    "vd v.v tp ts ths gs pgs ông bà tr tt q kh".split()  # Vietnamese: ví dụ, vân vân, thành phố, ...
)
_BOUNDARY = re.compile(r"[.?!…]+[\"'”’)\]]*(?=\s+\S)")
_VI_LETTERS = set(
    "àáảãạăằắẳẵặâầấẩẫậđèéẻẽẹêềếểễệìíỉĩịòóỏõọôồốổỗộơờớởỡợùúủũụưừứửữựỳýỷỹỵ"
)


def _ends_sentence(text: str, start: int, end: int) -> bool:
    """Whether punctuation at ``text[start:end]`` closes a sentence.

    It does when the next word starts with an upper-case letter (or an
    opening quote before one) and the word before it is not an abbreviation,
    a number (``1.``, ``2.5``) or a single-letter initial (``J. Smith``).
    """
    after = text[end:].lstrip()
    after = after.lstrip("\"'“‘([")
    if not after or not after[0].isupper():
        return False
    if text[start] != ".":
        return True
    before = re.search(r"(\S+)$", text[:start])
    word = before.group(1).lstrip("\"'“‘([").lower() if before else ""
    if word in ABBREVIATIONS or word.rstrip(".") in ABBREVIATIONS:
        return False
    if re.fullmatch(r"[\d.,]+", word) or (len(word) == 1 and word.isalpha()):
        return False
    return True


def split_sentences(paragraph: str) -> list[str]:
    """Rule-based splitter: break after ``.?!…`` (and closing quotes) + space + upper case.

    Deliberately simple and predictable: no model, the same output on every
    machine. See :func:`_ends_sentence` for the exceptions.
    """
    sentences, begin = [], 0
    for match in _BOUNDARY.finditer(paragraph):
        if _ends_sentence(paragraph, match.start(), match.end()):
            sentences.append(paragraph[begin : match.end()].strip())
            begin = match.end()
    sentences.append(paragraph[begin:].strip())
    return [s for s in sentences if s]


def looks_vietnamese(text: str, min_share: float = 0.2) -> bool:
    """At least ``min_share`` of the words carry a Vietnamese letter (``ư``, ``ộ``, ``đ``...).

    Translated documentation falls back to English where a paragraph was not
    translated; Vietnamese prose has diacritics on most words, English almost
    none, so a low threshold separates them well.
    """
    words = text.lower().split()
    if not words:
        return False
    marked = sum(1 for w in words if any(c in _VI_LETTERS for c in w))
    return marked / len(words) >= min_share


# ---------------------------------------------------------------------------
# reading one package


def _read_catalogs(package: str, root: Path, result: PackageResult) -> list[pa.Table]:
    """Pairs from every vi catalog of an unpacked package; unreadable ones are reported."""
    tables = []
    for origin, path in catalog_origins(package, find_vi_catalogs(root)).items():
        try:
            table = catalog_table(path, origin)
        except CatalogError as err:
            result.reason += f"{origin}: {err}; "
            continue
        result.catalogs[origin] = table.num_rows
        tables.append(table)
    return tables


def _read_docs(package: str, root: Path, lang: str, result: PackageResult) -> dict[str, list[str]]:
    """Sentences of each ``lang`` documentation page, keyed by origin ``<package>/<page path>``."""
    docs = {}
    for path in find_docs(root, lang):
        origin = f"{package}/{path.relative_to(root).as_posix()}"
        sentences = [s for p in document_paragraphs(path) for s in split_sentences(p)]
        if sentences:
            docs[origin] = sentences
            result.docs[origin] = len(sentences)
    return docs


def process_package(package: str, cache: Path, doc_lang: str = "vi") -> tuple[PackageResult, list[pa.Table], dict]:
    """Download, unpack, read and delete one package."""
    result = PackageResult(package, "skipped")
    deb, why = download(package, cache)
    if deb is None:
        result.reason = f"not downloadable: {why}"
        return result, [], {}
    result.version = deb_field(deb, "Version")
    with tempfile.TemporaryDirectory(prefix=f"mtcore-{package}-") as tmp:
        root = Path(tmp)
        extract(deb, root)
        tables = _read_catalogs(package, root, result)
        docs = _read_docs(package, root, doc_lang, result)
        result.license = read_license(root, package)
    if any(t.num_rows for t in tables) or docs:
        result.status = "used"
    elif result.catalogs:
        result.reason += "vi catalogs hold no translated message"
    elif not result.reason:
        result.reason = f"no {doc_lang} catalog or documentation"
    return result, tables, docs


def read_local_catalogs(skip_packages: set[str]) -> tuple[list[pa.Table], dict[str, int]]:
    """This machine's own vi catalogs, except those of packages read from .debs already."""
    tables, counts = [], {}
    if not LOCAL_LOCALE_DIR.is_dir():
        return tables, counts
    for path in sorted(LOCAL_LOCALE_DIR.glob("*.mo")):
        owner = local_owner(path)
        if owner in skip_packages:
            continue
        origin = f"local/{owner}/{path.stem}"
        try:
            table = catalog_table(path, origin)
        except CatalogError:
            continue
        if table.num_rows:  # header-only catalogs hold no pair
            tables.append(table)
            counts[origin] = table.num_rows
    return tables, counts


# ---------------------------------------------------------------------------
# normalisation, deduplication, splits


def normalise_source(text: str) -> str:
    """The key under which two sources count as the same sentence.

    NFC, accelerator markers (``_``, ``&``) removed, case-folded,
    whitespace collapsed: ``"_Open File"`` and ``"open  file"`` are one.
    """
    text = unicodedata.normalize("NFC", text).replace("_", "").replace("&", "")
    return " ".join(text.casefold().split())


def origin_package(origin: str) -> str:
    """The package an origin comes from (``local/<owner>/<catalog>`` → owner)."""
    parts = origin.split("/")
    return parts[1] if parts[0] == "local" and len(parts) > 2 else parts[0]


def dedupe_pairs(table: pa.Table) -> pa.Table:
    """Keep each exact (src, tgt) once, from the first origin in sorted order."""
    table = table.sort_by([("origin", "ascending"), ("id", "ascending")])
    seen, keep = set(), []
    for pair in zip(table["src"].to_pylist(), table["tgt"].to_pylist()):
        keep.append(pair not in seen)
        seen.add(pair)
    return table.filter(pa.array(keep))


def is_junk(src: str, tgt: str) -> str:
    """Why a dev/test pair is obvious junk ("" if it is not).

    Only what makes a pair useless for evaluation; placeholders that do not
    match are left in, as real test data has them.
    """
    if not src.strip() or not tgt.strip():
        return "empty side"
    if normalise_source(src) == normalise_source(tgt):
        return "untranslated"
    if len(src.split()) < 2:
        return "source under 2 words"
    return ""


def clean_heldout(table: pa.Table, banned: set[str]) -> pa.Table:
    """Held-out pairs minus junk, minus sources in ``banned`` (train, the other split), deduplicated."""
    seen, keep = set(banned), []
    for src, tgt in zip(table["src"].to_pylist(), table["tgt"].to_pylist()):
        key = normalise_source(src)
        ok = key not in seen and not is_junk(src, tgt)
        keep.append(ok)
        if ok:
            seen.add(key)
    return table.filter(pa.array(keep, type=pa.bool_()))


@dataclass
class Splits:
    """Which catalogs (origins) are held out, by purpose."""

    dev: list[str]
    test: list[str]
    mono: list[str]

    def heldout(self) -> set[str]:
        return set(self.dev) | set(self.test) | set(self.mono)


def heldout_candidates(table: pa.Table, cfg: BuildConfig) -> list[str]:
    """Mid-sized catalogs of downloaded packages, in a seeded order.

    Sorted first so that the order depends on the seed only, not on the
    order the packages were read in.
    """
    counts = Counter(table["origin"].to_pylist())
    eligible = sorted(
        o for o, n in counts.items() if cfg.heldout_min <= n <= cfg.heldout_max and not o.startswith("local/")
    )
    random.Random(cfg.seed).shuffle(eligible)
    return eligible


class _SourceIndex:
    """How many rows of each normalised source each origin has, to test leakage fast."""

    def __init__(self, table: pa.Table) -> None:
        self.total: Counter = Counter()
        self.by_origin: dict[str, Counter] = {}
        for origin, src in zip(table["origin"].to_pylist(), table["src"].to_pylist()):
            key = normalise_source(src)
            self.total[key] += 1
            self.by_origin.setdefault(origin, Counter())[key] += 1

    def usable(self, origin: str, held: set[str], taken: set[str], table_rows: list[tuple[str, str]]) -> int:
        """Rows of ``origin`` that survive cleaning if ``held`` catalogs leave train."""
        held_counts = Counter()
        for o in held | {origin}:
            held_counts.update(self.by_origin.get(o, {}))
        n, seen = 0, set(taken)
        for src, tgt in table_rows:
            key = normalise_source(src)
            if key in seen or is_junk(src, tgt) or self.total[key] > held_counts[key]:
                continue
            seen.add(key)
            n += 1
        return n


def choose_splits(table: pa.Table, cfg: BuildConfig) -> Splits:
    """Pick held-out catalogs for dev, test and mono, one catalog per package.

    Greedy in seeded order: a catalog joins dev until dev would reach
    ``dev_pairs`` usable pairs (usable = survives junk removal and is not in
    what train would still hold), then test likewise, then mono until it has
    ``mono_catalog_pairs`` rows. Taking more catalogs out of train later only
    makes earlier counts larger, so the targets hold at the end.
    """
    index = _SourceIndex(table)
    rows: dict[str, list[tuple[str, str]]] = {}
    for origin, src, tgt in zip(table["origin"].to_pylist(), table["src"].to_pylist(), table["tgt"].to_pylist()):
        rows.setdefault(origin, []).append((src, tgt))
    splits, used_packages = Splits([], [], []), set()
    held: set[str] = set()
    sizes = {"dev": 0, "test": 0, "mono": 0}
    targets = {"dev": cfg.dev_pairs, "test": cfg.test_pairs, "mono": cfg.mono_catalog_pairs}
    taken: set[str] = set()  # normalised sources already in dev, kept out of test
    for origin in heldout_candidates(table, cfg):
        purpose = next((p for p in ("dev", "test", "mono") if sizes[p] < targets[p]), None)
        if purpose is None:
            break
        if origin_package(origin) in used_packages:
            continue
        gain = len(rows[origin]) if purpose == "mono" else index.usable(origin, held, taken, rows[origin])
        if gain < cfg.heldout_min // 3:  # mostly duplicates of other catalogs: useless here
            continue
        getattr(splits, purpose).append(origin)
        held.add(origin)
        used_packages.add(origin_package(origin))
        sizes[purpose] += gain
        if purpose == "dev":
            taken |= {normalise_source(s) for s, _ in rows[origin]}
    return splits


def mono_from_catalogs(table: pa.Table, banned_targets: set[str], cfg: BuildConfig) -> list[tuple[str, str]]:
    """(text, origin) sentences from the Vietnamese side of held-out catalogs.

    Untranslated messages (target equal to source) are not Vietnamese and go;
    so does any target that is also a dev/test reference, which back-translation
    would otherwise leak into training.
    """
    out = []
    for src, tgt, origin in zip(table["src"].to_pylist(), table["tgt"].to_pylist(), table["origin"].to_pylist()):
        if normalise_source(src) == normalise_source(tgt) or normalise_source(tgt) in banned_targets:
            continue
        for paragraph in tgt.split("\n"):
            out += [(s, origin) for s in split_sentences(" ".join(paragraph.split()))]
    return [(t, o) for t, o in out if cfg.mono_min_words <= len(t.split()) <= cfg.mono_max_words]


def mono_from_docs(docs: dict[str, list[str]], cfg: BuildConfig) -> list[tuple[str, str]]:
    """(text, origin) Vietnamese sentences of documentation, within the length bounds."""
    return [
        (s, origin)
        for origin in sorted(docs)
        for s in docs[origin]
        if cfg.mono_min_words <= len(s.split()) <= cfg.mono_max_words and looks_vietnamese(s)
    ]


def mono_table(rows: list[tuple[str, str]]) -> pa.Table:
    """Monolingual rows as a table, each text once (first origin in sorted order)."""
    seen, texts, origins = set(), [], []
    for text, origin in sorted(rows, key=lambda r: r[1]):
        if text in seen:
            continue
        seen.add(text)
        texts.append(text)
        origins.append(origin)
    ids = [hashlib.sha1(f"{o}\x1f{t}".encode()).hexdigest()[:16] for t, o in zip(texts, origins)]
    return pa.table({"text": texts, "origin": origins, "id": ids}, schema=MONO_SCHEMA)


def in_origins(table: pa.Table, origins: set[str]) -> pa.Table:
    """Rows whose origin is one of ``origins``."""
    return table.filter(pc.is_in(table["origin"], value_set=pa.array(sorted(origins), type=pa.string())))


# ---------------------------------------------------------------------------
# the build


@dataclass
class BuildResult:
    """Everything the build made, with the figures for the summary."""

    packages: list[PackageResult]
    local: dict[str, int]
    splits: Splits
    stats: dict


def _write_doc_pairs(docs: dict[str, dict[str, list[str]]], out: Path) -> list[str]:
    """Sentence lists of known English/Vietnamese document pairs, in reading order."""
    written = []
    for name, (en_pkg, vi_pkg) in DOC_PAIRS.items():
        if not docs.get(en_pkg) or not docs.get(vi_pkg):
            continue
        for lang, pkg in (("en", en_pkg), ("vi", vi_pkg)):
            pages = docs[pkg]
            path = out / "docs" / f"{name}.{lang}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            lines = [s for origin in _reading_order(pages) for s in pages[origin]]
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            written.append(str(path))
    return written


def _reading_order(pages: dict[str, list[str]]) -> list[str]:
    """Pages of a DocBook HTML book in chapter order (index first, then as linked)."""
    chapters = ["index", "start", "first", "modify", "dreq", "dother", "build", "checkit", "upload",
                "update", "advanced"]  # fmt: skip  maint-guide's chapters
    def rank(origin: str) -> tuple[int, str]:
        stem = Path(origin).name.split(".")[0]
        return (chapters.index(stem) if stem in chapters else len(chapters), origin)
    return sorted(pages, key=rank)


def _statistics(raw: pa.Table, dev: pa.Table, test: pa.Table, mono: pa.Table, packages, splits) -> dict:
    """The figures of stats.json."""
    used = [p for p in packages if p.status == "used"]
    return {
        "raw_pairs": raw.num_rows,
        "raw_packages": len({origin_package(o) for o in raw["origin"].to_pylist()}),
        "raw_catalogs": len(set(raw["origin"].to_pylist())),
        "dev_pairs": dev.num_rows,
        "test_pairs": test.num_rows,
        "mono_sentences": mono.num_rows,
        "mono_from_catalogs": sum(1 for o in mono["origin"].to_pylist() if o in set(splits.mono)),
        "packages_listed": len(packages),
        "packages_used": len(used),
        "packages_skipped": len(packages) - len(used),
        "catalogs_read": sum(len(p.catalogs) for p in packages),
        "dev_catalogs": splits.dev,
        "test_catalogs": splits.test,
        "mono_catalogs": splits.mono,
    }


def read_packages(cfg: BuildConfig, progress=print) -> tuple[list[PackageResult], list[pa.Table], dict]:
    """Read every listed package: results, catalog tables and documentation sentences by package."""
    packages, tables, docs = [], [], {}
    for name in read_package_list(cfg.packages_file):
        lang = "en" if name in EN_DOC_PACKAGES else "vi"
        result, found, pages = process_package(name, Path(cfg.cache), lang)
        pairs = sum(result.catalogs.values())
        progress(f"{name:36s} {result.status:8s} {pairs:7d} pairs  {result.reason[:70]}")
        packages.append(result)
        tables += found
        if pages:
            docs[name] = pages
    return packages, tables, docs


def split_corpus(everything: pa.Table, cfg: BuildConfig) -> tuple[pa.Table, pa.Table, pa.Table, Splits]:
    """(raw train, dev, test, splits): held-out catalogs out of train, dev/test cleaned and deduplicated."""
    splits = choose_splits(everything, cfg)
    heldout = pa.array(sorted(splits.heldout()), type=pa.string())
    train = dedupe_pairs(everything.filter(pc.invert(pc.is_in(everything["origin"], value_set=heldout))))
    train_sources = {normalise_source(s) for s in train["src"].to_pylist()}
    dev = clean_heldout(dedupe_pairs(in_origins(everything, set(splits.dev))), train_sources)
    dev_sources = {normalise_source(s) for s in dev["src"].to_pylist()}
    test = clean_heldout(dedupe_pairs(in_origins(everything, set(splits.test))), train_sources | dev_sources)
    return train, dev, test, splits


def build(cfg: BuildConfig, progress=print) -> BuildResult:
    """Build ``data/``: read packages, split, write Parquet, SOURCES.md and stats.json."""
    packages, tables, docs = read_packages(cfg, progress)
    local_counts = {}
    if cfg.include_local:
        local_tables, local_counts = read_local_catalogs({p.name for p in packages if p.status == "used"})
        tables += local_tables
    everything = pa.concat_tables(tables) if tables else TABLE_SCHEMA.empty_table()
    train, dev, test, splits = split_corpus(everything, cfg)
    references = {normalise_source(t) for t in dev["tgt"].to_pylist() + test["tgt"].to_pylist()}
    vi_docs = {o: s for pkg, pages in docs.items() if pkg not in EN_DOC_PACKAGES for o, s in pages.items()}
    mono_rows = mono_from_catalogs(in_origins(everything, set(splits.mono)), references, cfg)
    mono = mono_table(mono_rows + mono_from_docs(vi_docs, cfg))
    out = Path(cfg.output)
    write_parquet(train, out / "raw" / "parallel.parquet")
    write_parquet(dev, out / "dev.parquet")
    write_parquet(test, out / "test.parquet")
    write_parquet(mono, out / "mono" / "vi.parquet")
    doc_files = _write_doc_pairs(docs, out)
    stats = _statistics(train, dev, test, mono, packages, splits)
    stats["doc_pair_files"] = [str(Path(f).relative_to(out)) for f in doc_files]
    stats["seed"] = cfg.seed
    (out / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    sources = sources_markdown(packages, local_counts, train, splits, stats, cfg)
    (out / "SOURCES.md").write_text(sources, encoding="utf-8")
    return BuildResult(packages, local_counts, splits, stats)


# ---------------------------------------------------------------------------
# provenance


def sources_markdown(packages, local_counts, train: pa.Table, splits: Splits, stats: dict, cfg: BuildConfig) -> str:
    """SOURCES.md: where every pair came from, under which licence, and how the splits were made."""
    contributed = Counter(origin_package(o) for o in train["origin"].to_pylist())
    lines = [
        "# Sources of the embedded corpus",
        "",
        "Built by `python pipelines/build_corpus.py` (`mtcore/corpus_build.py`) from Debian "
        "bookworm packages, fetched with `apt-get download` and unpacked with `dpkg-deb -x` "
        f"(never installed). Seed {cfg.seed}. Figures: `stats.json`.",
        "",
        "## Packages used",
        "",
        "| package | version | license | catalogs (held-out split) | pairs in raw train |",
        "|---|---|---|---|---|",
    ]
    purpose = {o: name for name in ("dev", "test", "mono") for o in getattr(splits, name)}
    for p in packages:
        if p.status != "used":
            continue
        cats = ", ".join(_catalog_label(o, purpose) for o in p.catalogs) or "—"
        if p.docs:
            cats += f" (+{len(p.docs)} doc pages)"
        lines.append(f"| {p.name} | {p.version} | {p.license} | {cats} | {contributed.get(p.name, 0)} |")
    if local_counts:
        lines += ["", "This machine's own `/usr/share/locale/vi/LC_MESSAGES` catalogs (owner not in the list):", ""]
        lines += [f"- `{o}`: {n} pairs" for o, n in sorted(local_counts.items())]
    skipped = [p for p in packages if p.status != "used"]
    lines += ["", "## Packages tried and skipped", "", "| package | why |", "|---|---|"]
    lines += [f"| {p.name} | {p.reason.strip()} |" for p in skipped] or ["| — | — |"]
    lines += [
        "",
        "## How the splits were made",
        "",
        f"- **dev** ({stats['dev_pairs']} pairs) and **test** ({stats['test_pairs']} pairs) are whole "
        f"catalogs held out of training: mid-sized catalogs ({cfg.heldout_min}–{cfg.heldout_max} pairs), "
        f"at most one per package, taken in an order shuffled with seed {cfg.seed}.",
        f"  - dev: {', '.join(splits.dev)}",
        f"  - test: {', '.join(splits.test)}",
        "- Their pairs are deduplicated against train and against each other by a normalised source "
        "(NFC, accelerator markers `_`/`&` removed, case-folded, whitespace collapsed), and cleaned of "
        "obvious junk only: an empty side, target equal to source, a source under 2 words.",
        f"- **mono** (`mono/vi.parquet`, {stats['mono_sentences']} sentences): the Vietnamese side of further "
        f"held-out catalogs ({', '.join(splits.mono)}) minus untranslated messages and dev/test references, "
        "plus Vietnamese documentation (HTML and man pages) stripped of markup and code. Text is split into "
        "sentences by a rule-based splitter (break after `.?!…` + space + upper case, not after "
        "abbreviations, numbers or initials); sentences of "
        f"{cfg.mono_min_words}–{cfg.mono_max_words} words are kept, documentation sentences only when "
        "≥ 20% of their words carry Vietnamese letters (untranslated help falls back to English).",
        "- **raw train** (`raw/parallel.parquet`, "
        f"{stats['raw_pairs']} pairs from {stats['raw_packages']} packages): every other catalog, each exact "
        "(src, tgt) kept once (first origin in sorted order), otherwise raw: untranslated copies, format "
        "strings, accelerators and multi-line help text stay for the cleaning stage.",
    ]
    if stats.get("doc_pair_files"):
        lines.append(
            "- `docs/maint-guide.{en,vi}.txt`: the English and Vietnamese Debian New Maintainers' Guide, one "
            "sentence a line in chapter order, for document alignment."
        )
    return "\n".join(lines) + "\n"


def _catalog_label(origin: str, purpose: dict[str, str]) -> str:
    """A catalog's name in SOURCES.md, with the split it was held out for."""
    name = origin.split("/", 1)[1]
    return f"{name} ({purpose[origin]})" if origin in purpose else name


def summary_rows(result: BuildResult) -> list[tuple[str, str]]:
    """(label, value) rows for the build script's printed summary."""
    s = result.stats
    return [
        ("packages listed", str(s["packages_listed"])),
        ("packages used / skipped", f"{s['packages_used']} / {s['packages_skipped']}"),
        ("catalogs read", str(s["catalogs_read"])),
        ("raw train pairs", f"{s['raw_pairs']} ({s['raw_packages']} packages, {s['raw_catalogs']} catalogs)"),
        ("dev / test pairs", f"{s['dev_pairs']} / {s['test_pairs']}"),
        ("mono sentences", f"{s['mono_sentences']} ({s['mono_from_catalogs']} from catalogs)"),
    ]


