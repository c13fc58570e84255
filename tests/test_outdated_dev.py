"""The outdated-translation dev set: msgmerge's fuzzy entries of real source catalogs, read and labelled."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from mtcore.alignment.devset import build_outdated_dev, outdated, source_catalogs
from mtcore.data.catalogs import read_po

ROOT = Path(__file__).resolve().parent.parent

# The shape msgmerge --previous leaves: a fuzzy flag, the previous msgid (continued over lines), the new msgid.
PO = '''msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"

#: src/files.c:10
#, fuzzy, c-format
#| msgctxt "menu"
#| msgid "Show hidden "
#| "files"
msgid "Show backup files"
msgstr "Hiện tập tin ẩn"

#, fuzzy
#| msgid "Cuttle Fish"
msgid "Cuttlefish"
msgstr "Mực"

#, fuzzy
#| msgid "East Gate"
msgid "West Gate"
msgstr "East Gate"

#, fuzzy
msgid "Remove the package"
msgstr "Gỡ bỏ gói"

msgid "Open the file"
msgstr "Mở tập tin"

msgid "Quit"
msgstr "Thoát"

msgid "Save"
msgstr "Lưu"

msgid "Hidden files"
msgstr "Tập tin ẩn"
'''


def write_po(path: Path, text: str = PO) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_fuzzy_entries_carry_the_english_their_translation_was_made_for(tmp_path):
    entries = read_po(write_po(tmp_path / "vi.po"), include_fuzzy=True)
    by_id = {e.msgid: e for e in entries}
    assert by_id["Show backup files"].fuzzy and by_id["Show backup files"].previous == "Show hidden files"  # continued line
    assert by_id["Cuttlefish"].previous == "Cuttle Fish"
    assert by_id["Remove the package"].fuzzy and by_id["Remove the package"].previous is None  # msgmerge without --previous
    assert not by_id["Quit"].fuzzy and by_id["Quit"].previous is None
    assert "Show backup files" not in {e.msgid for e in read_po(tmp_path / "vi.po")}  # fuzzy ones still only on request


@pytest.mark.parametrize("new, old, expected", [
    ("Show backup files", "Show hidden files", True),
    ("Error loading default core game files", "Error loading game files", True),  # a translation that misses words
    ("West Gate", "East Gate", True),
    ("Cuttlefish", "Cuttle Fish", False),  # words joined
    ("You are playing as Konrad.", "You are playing Konrad.", False),  # a function word
    ("_Open the file…", "&Open the File...", False),  # accelerator, case, punctuation
    ("Kunaṟ", "Kunar", False),  # a transliteration's accent
    ("The requested data are not available.", "The requested data were not available.", False),  # auxiliaries
    ("The certificate doesn't have a known issuer.", "The certificate hasn't got a known issuer.", False),
    ("The certificate has a known issuer.", "The certificate hasn't got a known issuer.", True),  # negation counts
])
def test_outdated_means_changed_content_words(new, old, expected):
    assert outdated(new, old) is expected


def test_outdated_dev_mixes_real_outdated_translations_with_the_catalogs_correct_pairs(tmp_path):
    cats = [("pkg/po", read_po(write_po(tmp_path / "vi.po"), include_fuzzy=True))]
    dev = build_outdated_dev(cats, share=0.25, seed=0)
    rows = {r["src"]: r for r in dev.to_pylist()}
    assert rows["Show backup files"]["label"] == 1 and rows["Show backup files"]["tgt"] == "Hiện tập tin ẩn"
    assert rows["Show backup files"]["previous"] == "Show hidden files" and rows["Show backup files"]["kind"] == "outdated"
    assert "Cuttlefish" not in rows and "Remove the package" not in rows  # unchanged content; no previous English
    assert rows["West Gate"]["label"] == 1
    assert sum(dev["label"].to_pylist()) == 2 and len(dev) == 2 + 4  # 2 bad at a 25 % share want 6 correct: 4 exist
    assert all(r["label"] == 0 and r["kind"] == "ok" and r["previous"] == r["src"] for r in rows.values() if r["src"] in ("Quit", "Save"))
    # the target-language check drops a fuzzy "translation" left in English; quotas cap a catalog and a package
    dev = build_outdated_dev(cats, share=0.5, is_target_language=lambda texts: [t != "East Gate" for t in texts])
    assert dev.filter(pc.equal(dev["label"], 1))["src"].to_pylist() == ["Show backup files"] and len(dev) == 2
    assert sum(build_outdated_dev(cats + [("pkg/other", cats[0][1])], share=0.5, per_catalog=1, per_source=1)["label"].to_pylist()) == 1
    with pytest.raises(ValueError, match="share"):
        build_outdated_dev(cats, share=1.5)


def test_source_catalog_origins_name_package_and_folder(tmp_path):
    a = write_po(tmp_path / "gimp-2.10" / "po-plug-ins" / "vi.po")
    b = write_po(tmp_path / "gimp-2.10" / "po" / "vi.po")
    bad = write_po(tmp_path / "gimp-2.10" / "po-broken" / "vi.po", 'msgid "x"\nmsgstr "y"\nmsgid "x"\nmsgstr "z"\n')
    kde = write_po(tmp_path / "gimp-2.10" / "po" / "vi" / "gimp-help.po")
    kde_dvi = write_po(tmp_path / "gimp-2.10" / "po" / "vi" / "gimp_dvi.po")
    got = source_catalogs("gimp", tmp_path, [a, b, bad, kde, kde_dvi])
    assert [o for o, _ in got] == ["gimp/po-plug-ins", "gimp/po", "gimp/po/gimp-help", "gimp/po/gimp_dvi"]  # the broken one skipped


@pytest.mark.parametrize("path, expected", [
    ("dpkg-1.21/po/vi.po", True), ("adduser-3/debian/po/vi.po", True), ("okular-22/po/vi/okular_dvi.po", True),
    ("okular-22/po/ga/okular_dvi.po", False),  # ends in "vi.po", but it is Irish
    ("gimp-2.10/po/vi.pot", False),
])
def test_a_vietnamese_catalog_is_named_vi_or_lies_in_a_vi_folder(path, expected):
    from mtcore.data.corpus_build import is_vi_po

    assert is_vi_po(Path(path)) is expected


def test_build_outdated_dev_command_on_unpacked_sources(tmp_path, capsys):
    cache = tmp_path / "cache"
    write_po(cache / "mtcore-test-source" / "mtcore-test-source-1.0" / "po" / "vi.po")
    (cache / "mtcore-test-source.done").touch()  # unpacked before: nothing to fetch
    (tmp_path / "packages.txt").write_text("mtcore-test-source  # a package no archive has\n")
    spec = importlib.util.spec_from_file_location("build_outdated_dev", ROOT / "pipelines/build_outdated_dev.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "outdated.parquet"
    assert script.main(["--packages", str(tmp_path / "packages.txt"), "--cache", str(cache), "--output", str(out), "--share", "0.4"]) == 0
    dev = pq.read_table(out)
    # "West Gate" / "East Gate" is an English string left in a fuzzy entry: not a Vietnamese translation, dropped
    assert dev.filter(pc.equal(dev["label"], 1))["src"].to_pylist() == ["Show backup files"]
    assert set(dev["origin"].to_pylist()) == {"mtcore-test-source/po"}
    assert "1 outdated translations from 1 catalogs" in capsys.readouterr().out


def test_the_shipped_set_is_labelled_as_built_and_held_out_with_dev_and_test(monkeypatch, tmp_path):
    from mtcore.data import paths
    from mtcore.data.corpus import heldout_texts

    dev = pq.read_table(paths.OUTDATED_DEV).to_pylist()
    bad = [r for r in dev if r["label"] == 1]
    assert len(bad) >= 300 and 0.1 < len(bad) / len(dev) < 0.3
    assert all(r["kind"] == "outdated" and outdated(r["src"], r["previous"]) for r in bad)
    assert all(r["kind"] == "ok" and r["previous"] == r["src"] for r in dev if r["label"] == 0)
    # the built-in encoder and classifier leave out every sentence of it, beside dev's and test's, and go on without it
    held = heldout_texts()
    assert {bad[0]["src"], bad[0]["tgt"]} <= held and pq.read_table(paths.DEV)["src"][0].as_py() in held
    monkeypatch.setattr(paths, "OUTDATED_DEV", tmp_path / "absent.parquet")
    assert bad[0]["src"] not in heldout_texts() or bad[0]["src"] in set(pq.read_table(paths.TEST)["src"].to_pylist())


def test_build_outdated_dev_without_any_source_refuses_and_keeps_the_output(tmp_path, capsys):
    (tmp_path / "packages.txt").write_text("mtcore-no-such-source\n")
    spec = importlib.util.spec_from_file_location("build_outdated_dev", ROOT / "pipelines/build_outdated_dev.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "outdated.parquet"
    code = script.main(["--packages", str(tmp_path / "packages.txt"), "--cache", str(tmp_path / "cache"), "--output", str(out)])
    assert code == 2 and not out.exists()
    assert "deb-src" in capsys.readouterr().err
