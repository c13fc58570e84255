"""The end of a training run: test BLEU/chrF with the best checkpoint, and what a reader opens in MLflow.

Logged to the run: `test/bleu`, `test/chrf` (signatures as tags), the best checkpoint
directory, the SentencePiece model, the resolved config, a table of sample
translations (source, reference, hypothesis), attention heatmaps (encoder
self-attention and decoder cross-attention, last layer, averaged over heads) for a
few dev sentences, the loss/BLEU curves, and a pyfunc model that translates.
"""

from __future__ import annotations

import json
import logging
import tempfile
import warnings
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HEATMAP_SENTENCES = 3


def evaluate_checkpoint(checkpoint_dir: str, pairs: list[tuple[str, str]], beam: int, device: str,
                        len_penalty: float = 0.7, max_len_a: float = 1.5, max_len_b: int = 10) -> dict[str, Any]:
    """Translate `pairs` sources with the checkpoint (the run's length penalty and length bound, as its validation
    decodes); BLEU/chrF with signatures and the hypotheses."""
    from mtcore.nmt.checkpoint import load_checkpoint
    from mtcore.config import DecodeConfig
    from mtcore.nmt.decoding import translate
    from mtcore.nmt.metrics import score_translations

    ckpt = load_checkpoint(checkpoint_dir, device=device)
    decode = DecodeConfig(beam=beam, len_penalty=len_penalty, max_len_a=max_len_a, max_len_b=max_len_b)
    hyps = translate(ckpt.model, ckpt.tokenizer, [s for s, _ in pairs], decode)
    params = sum(p.numel() for p in ckpt.model.parameters())
    scores = score_translations(hyps, [t for _, t in pairs], prefix="test", tgt_lang=ckpt.model_cfg.tgt_lang)
    return {**scores, "hyps": hyps, "params": params}


def attention_figures(checkpoint_dir: Path, sources: list[str], out_dir: Path) -> list[Path]:
    """Heatmaps for a few sentences, teacher-forced on the model's own greedy translation."""
    import torch

    from mtcore.nmt.checkpoint import load_checkpoint
    from mtcore.nmt.decoding import encode_sources, translate_ids
    from mtcore.nmt.model import attention_maps
    from mtcore.tracking.plots import attention_heatmap
    from mtcore.nmt.tokenizer import BOS_ID

    ckpt = load_checkpoint(checkpoint_dir)
    sp = ckpt.tokenizer.sp
    paths = []
    for i, text in enumerate(sources[:HEATMAP_SENTENCES]):
        src_ids = encode_sources(ckpt.tokenizer, [text], max_len=ckpt.model_cfg.max_positions - 1)
        hyp = translate_ids(ckpt.model, src_ids, beam=1)[0][:60]
        src = torch.tensor(src_ids)
        tgt_in = torch.tensor([[BOS_ID] + hyp])
        maps = attention_maps(ckpt.model, src, tgt_in)
        src_tokens = [sp.id_to_piece(t) for t in src_ids[0]]
        tgt_tokens = ["<s>"] + [sp.id_to_piece(t) for t in hyp]
        if maps.get("encoder"):  # the RNN (model.arch: rnn) has no encoder self-attention
            enc = maps["encoder"][-1][0].mean(0).float().numpy()  # (S, S)
            paths.append(attention_heatmap(enc, src_tokens, src_tokens, f"encoder self-attention, last layer: {text[:50]}", out_dir / f"encoder_self_attention_{i}.png"))
        cross = maps["cross"][-1][0].mean(0).float().numpy()  # (T, S)
        paths.append(attention_heatmap(cross, src_tokens, tgt_tokens, f"decoder cross-attention, last layer: {text[:50]}", out_dir / f"cross_attention_{i}.png"))
    return paths


def metric_history(client, run_id: str, names=("train/loss", "dev/loss", "dev/bleu")) -> dict[str, list[tuple[int, float]]]:
    return {n: sorted((m.step, m.value) for m in client.get_metric_history(run_id, n)) for n in names}


def log_corpus_input(path: str | Path, context: str) -> None:
    """A corpus as a dataset input of the active MLflow run (its Datasets panel): where it is, and its content
    fingerprint as the digest, so that runs on the same data show the same dataset."""
    import mlflow
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.types import ColSpec, Schema

    from mtcore.tracking import data_version

    path = Path(path)
    name = f"{path.parent.name}/{path.name}" if path.name in ("kept", "augmented") else path.name
    schema = Schema([ColSpec("string", "src"), ColSpec("string", "tgt")])
    with warnings.catch_warnings():  # MLflow registers its local-file source twice and warns that it picked one
        warnings.filterwarnings("ignore", message=".*can be interpreted in multiple ways.*")
        source = resolve_dataset_source(path.absolute().as_uri())
    mlflow.log_input(MetaDataset(source, name=name, digest=data_version(path), schema=schema), context=context)


def run_description(config: dict[str, Any], result: dict[str, Any], train_data: str, test_data: str,
                    n_test: int, params: int | None = None) -> str:
    """One paragraph for the run's Description: model, data, budget, test scores with their signatures."""
    m, t = config["model"], config["train"]
    size = f", {params / 1e6:.1f}M parameters" if params else ""
    limits = [f"{t['time_budget_min']:g} minutes" if t.get("time_budget_min") else "",
              f"{t['max_steps']} steps" if t.get("max_steps") else "", f"{t['max_epochs']} epochs"]
    budget = "at most " + ", ".join(limit for limit in limits if limit)  # whichever ends it first: all of them
    return (f"{m['arch']} {m['d_model']}d × {m['layers']} layers, {m['heads']} heads{size}, {m['src_lang']}→{m['tgt_lang']}, "
            f"trained on {train_data} with {budget}. Test ({test_data}, {n_test:,} pairs, beam "
            f"{config['job']['test_beam']}): BLEU {result['test/bleu']:.2f} ({result['test/bleu_signature']}), "
            f"chrF {result['test/chrf']:.2f} ({result['test/chrf_signature']}).")


def log_training_artifacts(run_id: str, tracking_uri: str, *, result: dict[str, Any], hyps: list[str],
                           test_pairs: list[tuple[str, str]], dev_sources: list[str], best_dir: Path, spm_model: str,
                           config: dict[str, Any], log_model: bool, train_data: str = "", test_data: str = "") -> None:
    """Test metrics with their signatures, and every artifact of a finished training run; the run ends FINISHED."""
    import mlflow

    from mtcore.tracking.plots import learning_curves

    mlflow.set_tracking_uri(tracking_uri)
    client = mlflow.MlflowClient()
    with mlflow.start_run(run_id=run_id):
        mlflow.log_metrics({"test/bleu": result["test/bleu"], "test/chrf": result["test/chrf"]}
                           | ({"model/params": float(result["params"])} if result.get("params") else {}))
        if train_data and test_data:
            for path, context in ((train_data, "training"), (test_data, "test")):
                log_corpus_input(path, context)
            params = result.get("params")
            mlflow.set_tag("mlflow.note.content",
                           run_description(config, result, train_data, test_data, len(test_pairs), params))
        mlflow.set_tags({
            "sacrebleu.bleu_signature": result["test/bleu_signature"],
            "sacrebleu.chrf_signature": result["test/chrf_signature"],
            "mtcore.best_checkpoint": str(best_dir),
        })
        mlflow.log_artifacts(str(best_dir), artifact_path="best_checkpoint")
        mlflow.log_artifact(spm_model, artifact_path="tokenizer")
        mlflow.log_dict(config, "config.json")
        mlflow.log_table(
            {"source": [s for s, _ in test_pairs[:50]], "reference": [t for _, t in test_pairs[:50]], "hypothesis": hyps[:50]},
            artifact_file="samples/test_translations.json",
        )
        with tempfile.TemporaryDirectory() as tmp:
            for path in attention_figures(best_dir, dev_sources, Path(tmp)):
                mlflow.log_artifact(str(path), artifact_path="attention")
            curves = learning_curves(metric_history(client, run_id), Path(tmp) / "learning_curves.png")
            mlflow.log_artifact(str(curves), artifact_path="plots")
            (Path(tmp) / "test_metrics.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
            mlflow.log_artifact(str(Path(tmp) / "test_metrics.json"))
        if log_model:
            from mtcore.tracking.pyfunc import log_translator

            log_translator(best_dir)
