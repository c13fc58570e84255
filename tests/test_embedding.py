"""Sentence encoders: training improves retrieval, save/load round-trips, Ray Train driver, external encoders."""

from __future__ import annotations

import re
import sys
import types

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import torch

from mtcore.embedding import EncoderError, EncoderNotAvailable, SentenceEncoder, load_encoder
from mtcore.embedding.encoder import REFERENCE_FILE, DualEncoder, EncoderConfig, is_encoder_dir, load_builtin, save_encoder
from mtcore.embedding.train import (
    EncoderTrainConfig,
    additive_margin_loss,
    fit,
    group_batches,
    quick_clean,
    retrieval_accuracy,
    split_reference,
    train_encoder,
)
from mtcore.nmt.tokenizer import train_tokenizer

NOUNS = [("file", "tệp"), ("folder", "thư mục"), ("window", "cửa sổ"), ("image", "hình ảnh"), ("printer", "máy in"),
         ("password", "mật khẩu"), ("user", "người dùng"), ("package", "gói"), ("server", "máy chủ"), ("network", "mạng"),
         ("disk", "đĩa"), ("keyboard", "bàn phím"), ("document", "tài liệu"), ("account", "tài khoản"), ("message", "thông điệp"),
         ("color", "màu"), ("font", "phông chữ"), ("page", "trang"), ("table", "bảng"), ("camera", "máy ảnh")]  # fmt: skip
VERBS = [("Open", "Mở"), ("Close", "Đóng"), ("Delete", "Xoá"), ("Save", "Lưu"), ("Copy", "Sao chép"), ("Print", "In"),
         ("Rename", "Đổi tên"), ("Create", "Tạo"), ("Select", "Chọn"), ("Show", "Hiện")]  # fmt: skip
ADJS = [("", ""), ("new", "mới"), ("selected", "đã chọn"), ("current", "hiện tại")]


def tiny_corpus() -> pa.Table:
    """800 compositional software-message pairs ('Open the new file' ↔ 'Mở tệp mới'), shuffled."""
    src, tgt = [], []
    for ve, vv in VERBS:
        for ne, nv in NOUNS:
            for ae, av in ADJS:
                src.append(" ".join(f"{ve} the {ae} {ne}".split()))
                tgt.append(" ".join(f"{vv} {nv} {av}".split()))
    order = np.random.default_rng(0).permutation(len(src))
    return pa.table(
        {
            "src": [src[i] for i in order],
            "tgt": [tgt[i] for i in order],
            "origin": [f"cat{i % 4}" for i in range(len(src))],
            "id": [f"p{i}" for i in range(len(src))],
        }
    )


TINY_MODEL = dict(vocab_size=400, d_model=64, d_ff=128, dim=64, heads=4)


def tiny_encoder(tmp_path, trained: bool, seed: int = 0) -> SentenceEncoder:
    table = tiny_corpus()
    tok = train_tokenizer(table["src"].to_pylist() + table["tgt"].to_pylist(), tmp_path / "spm.model", vocab_size=400)
    cfg = EncoderTrainConfig(model=EncoderConfig(**(TINY_MODEL | {"vocab_size": tok.vocab_size})), batch_size=64, epochs=30, warmup=10)
    torch.manual_seed(seed)
    model = DualEncoder(cfg.model)
    if trained:
        train = table.slice(0, 600)
        fit(model, tok.encode(train["src"].to_pylist()), tok.encode(train["tgt"].to_pylist()), cfg)
    return SentenceEncoder(model.eval(), tok)


def test_training_improves_heldout_retrieval(tmp_path):
    held = tiny_corpus().slice(600)
    args = (held["src"].to_pylist(), held["tgt"].to_pylist())
    before = retrieval_accuracy(tiny_encoder(tmp_path, trained=False), *args)
    after = retrieval_accuracy(tiny_encoder(tmp_path, trained=True), *args)
    assert before["p_at_1"] < 0.2
    assert after["p_at_1"] > 0.6
    assert after["p_at_1"] > before["p_at_1"] + 0.4


def test_encoder_outputs_unit_rows_and_round_trips(tmp_path):
    enc = tiny_encoder(tmp_path, trained=False)
    texts = ["Open the file", "Mở tệp", ""]
    vecs = enc.encode(texts)
    assert vecs.shape == (3, 64) and vecs.dtype == np.float32
    assert np.linalg.norm(vecs, axis=1) == pytest.approx([1.0, 1.0, 1.0], abs=1e-5)
    enc.save(tmp_path / "enc")
    assert is_encoder_dir(tmp_path / "enc")
    again = load_encoder(str(tmp_path / "enc"))
    np.testing.assert_allclose(again.encode(texts), vecs, atol=1e-6)
    # batch composition does not change a sentence's vector
    np.testing.assert_allclose(again.encode(texts, batch_size=1), vecs, atol=1e-5)


def test_the_encoder_reads_a_message_without_its_accelerator(tmp_path):
    """Issue 21: "S_tandby Now" / "_Vào chế độ chờ tức thì" (gnome-disk-utility) was a good pair rejected; the marker's
    place differs between a message and its translation, so the encoder reads neither."""
    enc = tiny_encoder(tmp_path, trained=False)
    marked, plain = enc.encode(["S_tandby Now", "_Vào chế độ chờ", "Save &As"]), enc.encode(["Standby Now", "Vào chế độ chờ", "Save As"])
    np.testing.assert_allclose(marked, plain, atol=1e-6)
    kept = enc.encode(["LC_ALL", "pa_IN", "R&D"])  # an identifier, a locale code, an abbreviation: not markers
    assert all(float(a @ b) < 0.999 for a, b in zip(kept, enc.encode(["LCALL", "paIN", "RD"])))


def test_a_bag_of_pieces_reads_past_the_positional_table(tmp_path):
    """Text after piece 64 counts: a long sentence cut short (a partial translation) is not its full self."""
    enc = tiny_encoder(tmp_path, trained=False)
    words = (tiny_corpus()["src"][0].as_py() + " ") * 40
    full, cut = words.strip(), " ".join(words.split()[: len(words.split()) // 2])
    pieces = len(enc.tokenizer.encode([cut])[0])
    assert pieces > enc.model.cfg.max_len  # both sides are longer than the old cut-off
    tail = "Mở tệp lưu trữ trong thư mục " * 20
    a, b = enc.encode([full + " " + tail, cut + " " + tail])
    assert float(a @ b) < 0.999
    attention = DualEncoder(EncoderConfig(**(TINY_MODEL | {"layers": 1, "vocab_size": enc.model.cfg.vocab_size})))
    assert attention.max_pieces == attention.cfg.max_len  # positions exist only up to max_len


def test_loss_prefers_aligned_pairs():
    x = np.eye(4, dtype=np.float32)
    aligned = additive_margin_loss(torch.from_numpy(x), torch.from_numpy(x), margin=0.3, scale=20.0)
    shuffled = additive_margin_loss(torch.from_numpy(x), torch.from_numpy(x[[1, 2, 3, 0]]), margin=0.3, scale=20.0)
    assert float(aligned) < 0.01 < float(shuffled)


def test_hard_negatives_raise_the_loss_only_when_they_are_close():
    x = torch.nn.functional.normalize(torch.eye(4, 8) + 0.1, dim=1)
    plain = additive_margin_loss(x, x, margin=0.3, scale=20.0)
    assert additive_margin_loss(x, x, 0.3, 20.0, x[:0]) == pytest.approx(plain.item())  # none given: unchanged
    near = torch.nn.functional.normalize(x[:2] + 0.05 * torch.randn(2, 8, generator=torch.Generator().manual_seed(0)), dim=1)
    far = torch.nn.functional.normalize(-x[:2], dim=1)
    assert additive_margin_loss(x, x, 0.3, 20.0, near) > plain + 0.1  # a near-identical wrong target is hard
    assert additive_margin_loss(x, x, 0.3, 20.0, far) == pytest.approx(plain.item(), abs=1e-3)


def test_fit_with_fuzzy_negatives_trains(tmp_path):
    from mtcore.alignment.negatives import fuzzy_partners

    table = tiny_corpus().slice(0, 300).sort_by([("origin", "ascending"), ("id", "ascending")])
    src, tgt = table["src"].to_pylist(), table["tgt"].to_pylist()
    hard = fuzzy_partners(src, tgt, table["origin"].to_pylist()).tolist()
    assert sum(h >= 0 for h in hard) > 250  # "Open the new file" has "Open the file" & co. in its catalog
    tok = train_tokenizer(src + tgt, tmp_path / "spm.model", vocab_size=400)
    cfg = EncoderTrainConfig(model=EncoderConfig(**(TINY_MODEL | {"vocab_size": tok.vocab_size})), batch_size=32, max_steps=20, warmup=2, log_every=10)
    torch.manual_seed(0)
    last = fit(DualEncoder(cfg.model), tok.encode(src), tok.encode(tgt), cfg, hard=hard)
    assert last["step"] == 20 and np.isfinite(last["loss"])


def test_group_batches_cover_rows_once():
    batches = group_batches(100, 16, 4, np.random.default_rng(0))
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(100))
    assert all(len(b) <= 16 for b in batches)


@pytest.mark.parametrize(
    "src, tgt, kept",
    [
        ("Open file", "Mở tệp", True),
        ("Open file", "Open file", False),  # untranslated copy
        ("", "Mở tệp", False),
        ("%s", "%s", False),  # no letters
        ("Open file", "Mở tệp " * 40, False),  # length ratio
    ],
)
def test_quick_clean(src, tgt, kept):
    t = pa.table({"src": [src], "tgt": [tgt], "origin": ["x"], "id": ["1"]})
    assert (len(quick_clean(t)) == 1) is kept


def test_config_rejects_unknown_keys():
    with pytest.raises(EncoderError, match="unknown training config key"):
        EncoderTrainConfig.from_dict({"epochz": 3})
    with pytest.raises(EncoderError, match=r"`heads` \(3\) must divide `d_model` \(64\)"):
        EncoderConfig(d_model=64, heads=3, layers=1)


def test_train_encoder_with_ray_train_logs_to_mlflow(tmp_path, ray_local, mlflow_uri, capsys):
    cfg = EncoderTrainConfig(model=EncoderConfig(**TINY_MODEL), batch_size=64, epochs=8, warmup=10, heldout=100, log_every=10)
    result = train_encoder(tiny_corpus(), tmp_path / "enc", cfg, run_name="tiny")
    assert is_encoder_dir(result.path)
    assert 50 < result.metrics["heldout_pairs"] <= 80  # at most a tenth of the (cleaned) 800 pairs
    assert result.metrics["p_at_1"] > 0.3
    reference = pq.read_table(result.path / REFERENCE_FILE)  # the filter's known-good pairs: never trained on
    assert result.metrics["reference_pairs"] == reference.num_rows and 60 <= reference.num_rows <= 80
    assert result.metrics["train_pairs"] + result.metrics["heldout_pairs"] + reference.num_rows <= 800
    import mlflow

    run = mlflow.MlflowClient(mlflow_uri).get_run(result.run_id)
    assert run.data.metrics["p_at_1_en_vi"] == pytest.approx(result.metrics["p_at_1_en_vi"])
    assert "loss" in run.data.metrics and "total" not in run.data.metrics  # step-wise, from rank 0
    assert run.info.status == "FINISHED"
    # the count line adds up: the pairs cleaning removed were in none of its figures
    import re

    said = capsys.readouterr()
    line = next(ln for ln in (said.out + said.err).splitlines() if ln.startswith("encoder: ") and "training pairs" in ln)
    n = {k: int(v.replace(",", "")) for v, k in re.findall(r"([\d,]+) (training pairs|read|removed by cleaning|held out|"
                                                          r"reference pairs|excluded|over max_pairs)", line)}
    assert n["read"] == sum(v for k, v in n.items() if k != "read") and n["removed by cleaning"] > 0, (line, n)
    out = said.out  # the user sees the workers' progress, the last step always
    steps = re.findall(r"encoder step +(\d+)/(\d+)  loss", out)
    assert steps and steps[-1][0] == steps[-1][1], out
    enc = load_builtin(result.path)
    assert enc.encode(["Open the file"]).shape == (1, 64)


def test_reference_split_holds_out_whole_catalogs():
    table = pa.table({"src": [f"s{i}" for i in range(1000)], "tgt": [f"t{i}" for i in range(1000)],
                      "origin": [f"cat{i // 20}" for i in range(1000)]})  # 50 catalogs of 20
    train, reference = split_reference(table, 100, seed=0)
    assert len(train) + len(reference) == 1000 and 100 <= len(reference) <= 120
    assert not set(train["origin"].to_pylist()) & set(reference["origin"].to_pylist())  # whole catalogs
    assert len(split_reference(table, 500, seed=0)[1]) <= 120  # at most a tenth of the data
    # many small catalogs rather than a few large ones: 4 catalogs of 200 beside 40 of 5 give the reference 40 small ones
    table = pa.table({"src": [f"s{i}" for i in range(1000)], "tgt": [f"t{i}" for i in range(1000)],
                      "origin": [f"big{i // 200}" if i < 800 else f"small{i // 5}" for i in range(1000)]})
    _, reference = split_reference(table, 100, seed=0)
    assert 50 <= len(reference) <= 150 and all(o.startswith("small") for o in reference["origin"].to_pylist())
    # a corpus of a few large catalogs still gets a reference, whole catalogs of it
    table = pa.table({"src": [f"s{i}" for i in range(1000)], "tgt": [f"t{i}" for i in range(1000)],
                      "origin": [f"cat{i // 50}" for i in range(1000)]})  # 20 catalogs of 50
    assert len(split_reference(table, 100, seed=0)[1]) in (100, 150)


def test_a_builtin_encoder_without_reference_pairs_is_incomplete(tmp_path):
    from mtcore.embedding import _complete

    path = tiny_encoder(tmp_path, trained=False).save(tmp_path / "builtin")
    assert is_encoder_dir(path) and not _complete(path)  # made before the reference split: ensure_builtin retrains it
    pa_table = tiny_corpus().slice(0, 60).select(["src", "tgt", "origin"])
    pq.write_table(pa_table, path / REFERENCE_FILE)
    assert _complete(path)


def test_external_encoder_missing_package_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails as if not installed
    with pytest.raises(EncoderNotAvailable, match="pip install sentence-transformers"):
        load_encoder("sentence-transformers/LaBSE")


def test_external_encoder_not_cached_fails_offline(monkeypatch):
    calls = {}

    class FakeST:
        def __init__(self, name, device=None, local_files_only=False):
            import os

            calls.update(name=name, local_files_only=local_files_only, offline=os.environ.get("HF_HUB_OFFLINE"))
            raise OSError(f"We couldn't connect to 'https://huggingface.co' to load {name}")

    monkeypatch.setitem(sys.modules, "sentence_transformers", types.SimpleNamespace(SentenceTransformer=FakeST))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(EncoderNotAvailable, match="not available offline.*--encoder builtin"):
        load_encoder("sentence-transformers/LaBSE")
    assert calls == {"name": "sentence-transformers/LaBSE", "local_files_only": True, "offline": "1"}


def test_encoder_spec_that_is_a_file_is_an_error(tmp_path):
    f = tmp_path / "model.bin"
    f.write_bytes(b"x")
    with pytest.raises(EncoderError, match="an encoder is a directory"):
        load_encoder(str(f))


def test_saved_weights_load_with_weights_only(tmp_path):
    model = DualEncoder(EncoderConfig(**TINY_MODEL))
    save_encoder(model, b"not-a-real-spm", tmp_path / "e")
    state = torch.load(tmp_path / "e" / "model.pt", weights_only=True)
    assert set(state) == set(model.state_dict())


def test_a_short_run_reaches_its_learning_rate():
    """A 60-step run under the 100-step warm-up peaked at 36 % of its rate; the warm-up is now at most a tenth."""
    from mtcore.embedding.train import warmup_cosine

    short = warmup_cosine(100, 60)
    assert max(short(s) for s in range(60)) > 0.95 and short(59) < 0.01
    long = warmup_cosine(100, 2800)  # the built-in encoder's run: its schedule is as it was
    assert long(49) == pytest.approx(0.5) and long(99) == pytest.approx(1.0, abs=0.01)


def test_a_small_corpus_says_what_its_encoder_lacks(caplog):
    """10 pairs gave "retrieval P@1 on 1 held-out pairs: 1.000" and no reference pairs, and align_filter then
    rejected half of a clean corpus: both said at training time."""
    from mtcore.embedding.train import warn_small

    with caplog.at_level("WARNING", logger="mtcore.embedding.train"):
        warn_small(train=9, held=1, reference=0)
    assert "measured on 1 held-out pair(s) only" in caplog.text and "0 reference pair(s) held out" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="mtcore.embedding.train"):
        warn_small(train=150_000, held=1000, reference=1000)
    assert caplog.text == ""


def test_a_corpus_far_larger_than_the_encoder_uses_is_sampled_before_cleaning():
    """Cleaning ran over every row of the corpus in one process to keep `max_pairs` of them."""
    from mtcore.embedding.train import EncoderTrainConfig, presample

    cfg = EncoderTrainConfig(max_pairs=10, heldout=2, reference_pairs=3)
    table = pa.table({"src": [f"s{i}" for i in range(200)], "tgt": [f"t{i}" for i in range(200)]})
    sample = presample(table, cfg)
    assert len(sample) == 60 and sample.equals(presample(table, cfg))  # 4 x (10 + 2 + 3), seeded
    ids = [int(s[1:]) for s in sample["src"].to_pylist()]
    assert ids == sorted(ids) and [int(t[1:]) for t in sample["tgt"].to_pylist()] == ids  # in order, pairs whole
    assert presample(table.slice(0, 60), cfg).num_rows == 60
