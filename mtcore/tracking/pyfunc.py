"""An MLflow pyfunc model that translates a column of sentences with an mtcore checkpoint.

    mlflow models predict -m runs:/RUN_ID/translator -i in.csv -t csv --env-manager local

Input: a DataFrame with a `src` column (or a single column), a list of strings, a Series, or one string.
Output: a list of translations; a blank or missing source gives a blank one. Decoding settings (beam,
len_penalty, max_len_a, max_len_b, batch_size) come from `params` when given, else the run's
(`train.len_penalty`, `train.max_len_a/b`, as its test BLEU was decoded) and DecodeConfig's.
"""

from __future__ import annotations

import logging
from pathlib import Path

import mlflow.pyfunc

from mtcore.config import DecodeConfig, TrainConfig

log = logging.getLogger(__name__)

ARTIFACT = "checkpoint"
# Inference params the model accepts, with DecodeConfig's defaults: predict(..., params={"beam": 1}). A logged model's
# own defaults are its run's (`decode_params`): MLflow fills every param left out from the logged ones.
PARAMS = {k: DecodeConfig().to_dict()[k] for k in ("beam", "len_penalty", "max_len_a", "max_len_b", "batch_size")}


def decode_params(decode: DecodeConfig) -> dict:
    """`decode`'s PARAMS, each as the type of its default: an int `len_penalty` (a YAML `1`) would make MLflow's
    schema a long one, which refuses 0.5."""
    return {k: type(v)(getattr(decode, k)) for k, v in PARAMS.items()}


class Translator(mlflow.pyfunc.PythonModel):
    # The input is deliberately untyped (a DataFrame, a Series or a list): no type-hint validation, and no
    # warning at class creation advising it.
    _skip_type_hint_validation = True

    def load_context(self, context):
        from mtcore.nmt.checkpoint import load_checkpoint
        from mtcore.nmt.decoding import run_decode

        self.ckpt = load_checkpoint(context.artifacts[ARTIFACT])
        self.decode = run_decode(self.ckpt.train_cfg)

    def predict(self, context, model_input, params=None):
        from mtcore.nmt.decoding import translate

        # MLflow's inference params: the PARAMS fields of DecodeConfig, e.g. {"beam": 1}, over the run's settings
        given = DecodeConfig.from_params(params)  # checks and parses them
        decode = self.decode.replace(**{k: getattr(given, k) for k in params or {}})
        # A blank row is a blank translation (`translate`), as in `mtcore translate`: a model asked for one invents text
        return translate(self.ckpt.model, self.ckpt.tokenizer, _texts(model_input), decode)


def _texts(model_input) -> list[str]:
    """The source texts; a missing one (None, NaN, pd.NA: a blank line read by pandas) is an empty text, not "nan"
    or "<NA>". A DataFrame's sources are its `src` column, or its only one: with `id,text` the ids were translated.
    One string is one text, not a list of its characters."""
    import pandas as pd

    if isinstance(model_input, pd.DataFrame):
        values = model_input[_source_column(model_input)].tolist()
    elif isinstance(model_input, pd.Series):
        values = model_input.tolist()
    elif isinstance(model_input, str):
        values = [model_input]
    else:
        values = list(model_input)
    return ["" if x is None or (pd.api.types.is_scalar(x) and pd.isna(x)) else str(x) for x in values]


def _source_column(frame) -> str:
    if "src" in frame.columns:
        return "src"
    if len(frame.columns) != 1:
        raise ValueError(f"model input: a DataFrame with columns {[str(c) for c in frame.columns]}; name the column of "
                         "sources `src`, or pass that column alone")
    return frame.columns[0]


def log_translator(checkpoint_dir: str | Path, name: str = "translator", run=None):
    """Log the checkpoint as a pyfunc model of `run` (a `TrackedRun`; default: the active run), carrying
    mtcore's code with it. A models-from-code model (`translator_model.py`), not a pickled `Translator`."""
    if run is not None:
        mlflow.set_tracking_uri(run.uri)
        with mlflow.start_run(run_id=run.run_id):
            return log_translator(checkpoint_dir, name)
    import mtcore
    from mtcore.nmt.checkpoint import read_meta
    from mtcore.nmt.decoding import run_decode

    train = read_meta(checkpoint_dir).get("train")
    params = decode_params(run_decode(TrainConfig.from_dict(train) if train else None))

    return mlflow.pyfunc.log_model(
        name=name,
        python_model=str(Path(__file__).with_name("translator_model.py")),
        artifacts={ARTIFACT: str(checkpoint_dir)},
        code_paths=[str(Path(mtcore.__file__).parent)],
        pip_requirements=["torch", "sentencepiece", "sacrebleu", "pyarrow", "pyyaml", "numpy", "pandas"],
        input_example=(["Open the file"], params),  # the params schema: without one MLflow drops `params`
    )


def register_translator(model_uri: str, name: str, tags: dict[str, str]) -> str:
    """Register a logged translator in the model registry; returns `NAME/VERSION`."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):  # MLflow prints "Successfully registered…" itself, even under -q
        version = mlflow.register_model(model_uri, name, tags=tags)
    log.info("registered %s version %s in the MLflow model registry", version.name, version.version)
    return f"{version.name}/{version.version}"
