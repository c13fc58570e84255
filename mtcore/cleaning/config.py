"""YAML → validated rule list. Every error is found before any work starts and names its key.

Two forms are accepted:

    # a plain list: the rules, default normalisation
    - NonEmpty: {}
    - TooShort: {min_chars: 2}

    # a mapping: normalisation settings and the rules
    normalize: {nfc: true, whitespace: true, accelerators: true}
    rules:
      - NonEmpty: {}
      - LengthRatio: {min_ratio: 0.5, max_ratio: 2.5}

A rule may be written as a bare name (`- NonEmpty`) when it takes its defaults.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path

from mtcore.config import ConfigError, load_yaml  # the one config error of the project
from mtcore.cleaning.normalize import NormalizeConfig
from mtcore.cleaning.rules import REGISTRY, Rule

DEFAULT_RULES = Path(__file__).with_name("default_rules.yaml")
NATIVE_PAIR = ("en", "vi")  # the pair whose catalogs the rules' bounds and word lists were measured on


@dataclass
class CleaningConfig:
    rules: list[Rule]
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)
    source: str = "<dict>"
    langs: tuple[str, str] | None = None  # --langs: the corpus's languages, with or without a LanguageID rule

    @property
    def row_rules(self) -> list[Rule]:
        return [r for r in self.rules if not r.global_rule]

    @property
    def global_rules(self) -> list[Rule]:
        return [r for r in self.rules if r.global_rule]

    @property
    def sides_swapped(self) -> bool:
        """A vi-en corpus: the rules judge it as the en-vi pair their bounds and word lists were measured on (the
        length ratio's bounds, the number words of each side, the Vietnamese letters of a translation); read the
        other way round they rejected 42 of 3,000 embedded pairs where the same pairs as en-vi lost 17."""
        from mtcore import checks

        return self.langs is not None and tuple(checks.base_language(lang) for lang in self.langs) == NATIVE_PAIR[::-1]

    @property
    def english_side(self) -> str:
        """Where a catalog's English msgid is: `tgt` when only the target language is English (a vi-en corpus)."""
        from mtcore import checks

        base = [checks.base_language(lang) for lang in self.languages]
        return "tgt" if base[1] == "en" and base[0] != "en" else "src"

    @property
    def languages(self) -> tuple[str, str]:
        """The corpus's (src, tgt) languages: --langs, else as the language-ID rule expects them, else en-vi."""
        if self.langs is not None:
            return self.langs
        rule = next((r for r in self.rules if r.name() == "LanguageID"), None)
        return tuple(rule.languages) if rule is not None else ("en", "vi")

    def with_languages(self, src: str, tgt: str) -> CleaningConfig:
        """The same rules for another language pair: the language-ID rule expects `src` and `tgt`
        (the other rules do not depend on the languages)."""
        from mtcore import checks
        from mtcore.data.langid import known_languages

        try:
            src, tgt = checks.language_pair(f"{src.strip()}-{tgt.strip()}")  # EN-VI is en-vi; en-pt_BR keeps its region
        except checks.UsageError as err:
            raise ConfigError(str(err)) from None
        base = [checks.base_language(lang) for lang in (src, tgt)]  # what langid and the rules know
        unknown = [lang for lang, b in zip((src, tgt), base) if b not in known_languages()]
        if unknown and any(r.name() == "LanguageID" for r in self.rules):  # the only rule that needs to know them
            raise ConfigError(f"languages {src}-{tgt}: py3langid does not know {unknown}, so the LanguageID rule "
                              "cannot judge them; clean with a rules file without it (--config FILE)")
        if base[0] == base[1]:
            raise ConfigError(f"languages {src}-{tgt}: two variants of one language; the language rule cannot tell them apart")
        if tuple(base) == NATIVE_PAIR[::-1]:  # the rules see the pair swapped (`sides_swapped`)
            base, seen = list(NATIVE_PAIR), [tgt, src]
        else:
            seen = [src, tgt]
        rules = [dataclasses.replace(r, languages=base) if r.name() == "LanguageID"
                 else dataclasses.replace(r, languages=seen) if r.name() == "TestOverlap"
                 and not (r.languages is None and tuple(seen) == NATIVE_PAIR)  # None is en-vi: --langs en-vi is no change
                 else r for r in self.rules]
        return CleaningConfig(rules, self.normalize, source=f"{self.source} ({src}-{tgt})", langs=(src, tgt))

    # Rules about the corpus rather than the pair: a machine-made pair is judged without them.
    CORPUS_RULES = ("TestOverlap",)

    def for_pairs_alone(self) -> CleaningConfig:
        """The row rules that judge one pair by itself: what the back-translation stage applies to its
        synthetic pairs, so that a degenerate output ("format format format format") meets the same rule,
        with the same settings, as a corpus pair would."""
        rules = [r for r in self.row_rules if r.name() not in self.CORPUS_RULES]
        return CleaningConfig(rules, self.normalize, source=f"{self.source} (row rules)", langs=self.langs)

    def to_dict(self) -> dict:
        """The resolved configuration, defaults filled in (for report.json)."""
        return {
            "normalize": {f.name: getattr(self.normalize, f.name) for f in fields(self.normalize)},
            "rules": [{r.name(): r.params()} for r in self.rules],
        } | ({"languages": list(self.languages)} if tuple(self.languages) != NATIVE_PAIR
             else {})  # absent for en-vi, given or not: older keys stay, and --langs en-vi is the same stage;
        # a pair from --langs or from a rules file's LanguageID (that one went unrecorded, and the stages after
        # it read a de-en corpus as en-vi)


def _type_ok(value, annotation: str) -> bool:
    kinds = [a.strip() for a in str(annotation).split("|")]
    for kind in kinds:
        if kind == "None" and value is None:
            return True
        if kind == "bool" and isinstance(value, bool):
            return True
        if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if kind == "str" and isinstance(value, str):
            return True
        if kind.startswith("list") and isinstance(value, list):
            return True
    return False


def _check_params(where: str, cls, params, errors: list[str]) -> None:
    if not isinstance(params, dict):
        errors.append(f"{where}: parameters must be a mapping, found {type(params).__name__} ({params!r})")
        return
    known = {f.name: f for f in fields(cls) if f.init}
    unknown = sorted(set(params) - set(known))
    if unknown:
        errors.append(f"{where}: unknown parameter(s) {unknown}; {cls.__name__} takes {sorted(known) or 'none'}")
    for key, value in params.items():
        if key in known and not _type_ok(value, known[key].type):
            errors.append(f"{where}.{key}: expected {known[key].type}, found {type(value).__name__} ({value!r})")
        elif key in ("paths", "languages") and isinstance(value, list) and not all(isinstance(v, str) for v in value):
            odd = next(v for v in value if not isinstance(v, str))
            errors.append(f"{where}.{key}: expected a list of strings, found {type(odd).__name__} ({odd!r}); quote it")


_FRACTIONS = ("share", "prob", "overlap")  # parameters that are proportions, in [0, 1]


def _check_ranges(where: str, cls, params: dict, errors: list[str]) -> None:
    """Counts and bounds are non-negative, proportions at most 1, and every `min_X…` below its `max_X`
    (a LengthRatio of min 3, max 0.1 would silently reject almost everything)."""
    values = {f.name: params.get(f.name, f.default) for f in fields(cls) if f.init}
    numbers = {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for key, value in numbers.items():
        if value != value or value in (float("inf"), float("-inf")):  # .nan compares false with everything
            errors.append(f"{where}.{key}: {value} must be a finite number")
        elif value < 0:
            errors.append(f"{where}.{key}: {value} must be >= 0")
        elif any(word in key for word in _FRACTIONS) and value > 1:
            errors.append(f"{where}.{key}: {value} is a proportion; it must be in [0, 1]")
    for key, low in numbers.items():
        if not key.startswith("min_"):
            continue
        parts = key.removeprefix("min_").split("_")  # min_ratio_long is bounded by max_ratio
        upper = next((f"max_{'_'.join(parts[:i])}" for i in range(len(parts), 0, -1)
                      if f"max_{'_'.join(parts[:i])}" in numbers), None)
        if upper and low >= numbers[upper]:
            errors.append(f"{where}: {key} ({low}) must be below {upper} ({numbers[upper]})")


def _rule_entries(items, errors: list[str]) -> list[tuple[str, str, dict]]:
    if not isinstance(items, list):
        errors.append(f"rules: expected a list of {{RuleName: {{params}}}}, found {type(items).__name__}")
        return []
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {item: {}}
        if not isinstance(item, dict) or len(item) != 1:
            errors.append(f"rules[{i}]: expected one {{RuleName: {{params}}}}, found {item!r}")
            continue
        (name, params), = item.items()
        out.append((f"rules[{i}].{name}", name, {} if params is None else params))
    return out


def build_config(data, source: str = "<dict>") -> CleaningConfig:
    """Validate and instantiate; raises ConfigError listing every problem at once."""
    errors: list[str] = []
    normalize = {}
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"normalize", "rules"})
        if unknown:
            errors.append(f"unknown top-level key(s) {unknown}; expected 'normalize' and 'rules'")
        normalize = data.get("normalize")
        if isinstance(normalize, bool):  # `normalize: false`: every step off (it was read as "the defaults")
            normalize = {} if normalize else {f.name: False for f in fields(NormalizeConfig)}
        elif normalize is None:
            normalize = {}
        items = data.get("rules", [])
    else:
        items = data
    _check_params("normalize", NormalizeConfig, normalize, errors)
    entries = _rule_entries(items, errors)
    unknown_rules = [(w, n) for w, n, _ in entries if n not in REGISTRY]
    if unknown_rules:
        errors.append(
            f"unknown rule(s) {[n for _, n in unknown_rules]} at {[w for w, _ in unknown_rules]}; "
            f"available: {sorted(REGISTRY)}"
        )
    for where, name, params in entries:
        if name in REGISTRY:
            _check_params(where, REGISTRY[name], params, errors)
            if not errors:
                _check_ranges(where, REGISTRY[name], params, errors)
    if not entries and not errors:  # an empty or comment-only file, `rules: []`, or a mapping without `rules`
        errors.append("no rules: the file gives none, so nothing would be cleaned (list rules under `rules:`, or leave "
                      "--config out for the defaults)")
    global_names = [name for _, name, _ in entries if name in REGISTRY and REGISTRY[name].global_rule]
    if len(global_names) > 1:  # one corpus-wide pass (dedup) runs; a second would be ignored
        errors.append(f"corpus-wide rules {global_names}: give at most one")
    if errors:
        raise ConfigError(f"{source}: invalid cleaning config: " + "; ".join(errors) + "; fix these keys")
    rules = []
    for where, name, params in entries:
        try:
            rules.append(REGISTRY[name](**params))
        except (ValueError, OSError) as err:  # e.g. a held-out set that cannot be read
            raise ConfigError(f"{source}: {where}: {err}") from None
    return CleaningConfig(rules=rules, normalize=NormalizeConfig(**normalize), source=source)


def load_config(path: str | Path | None = None) -> CleaningConfig:
    """Read a YAML rules file (default: the shipped `default_rules.yaml`)."""
    path = Path(path) if path is not None else DEFAULT_RULES
    if not path.is_file():
        raise ConfigError(f"{path}: cleaning config not found")
    data = load_yaml(path)
    return build_config(data if data is not None else [], source=str(path))
