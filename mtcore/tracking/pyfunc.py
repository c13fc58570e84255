"""An MLflow pyfunc model that translates a column of sentences with an mtcore checkpoint.

    mlflow models predict -m runs:/RUN_ID/translator -i in.csv -t csv --env-manager local

Input: a DataFrame with a `src` column (or the first column), a list of strings, or a Series.
Output: a list of translations. Decoding settings (beam, len_penalty, max_len_a, max_len_b,
batch_size) come from `params` when given, else DecodeConfig's defaults.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import mlflow.pyfunc

from mtcore.config import DecodeConfig

log = logging.getLogger(__name__)

ARTIFACT = "checkpoint"
# Inference params the model accepts, with their defaults (DecodeConfig's): predict(..., params={"beam": 1})
PARAMS = {k: DecodeConfig().to_dict()[k] for k in ("beam", "len_penalty", "max_len_a", "max_len_b", "batch_size")}


class Translator(mlflow.pyfunc.PythonModel):
    # The input is deliberately untyped (a DataFrame, a Series or a list): no type-hint validation, and no
    # warning at class creation advising it.
    _skip_type_hint_validation = True

    def load_context(self, context):
        from mtcore.nmt.checkpoint import load_checkpoint

        self.ckpt = load_checkpoint(context.artifacts[ARTIFACT])

    def predict(self, context, model_input, params=None):
        from mtcore.nmt.decoding import translate
        from mtcore.nmt.tokenizer import normalize

        # MLflow's inference params: the PARAMS fields of DecodeConfig, e.g. {"beam": 1}
        decode = DecodeConfig.from_params(params)
        texts = _texts(model_input)
        # A blank row is a blank translation, as in `mtcore translate`: a model asked for one invents text.
        filled = [i for i, text in enumerate(texts) if normalize(text)]
        out = [""] * len(texts)
        if filled:
            for i, text in zip(filled, translate(self.ckpt.model, self.ckpt.tokenizer, [texts[i] for i in filled], decode)):
                out[i] = text
        return out


def _texts(model_input) -> list[str]:
    """The source texts; a missing one (None, NaN: a blank line read by pandas) is an empty text, not "nan"."""
    import pandas as pd

    if isinstance(model_input, pd.DataFrame):
        column = "src" if "src" in model_input.columns else model_input.columns[0]
        values = model_input[column].tolist()
    elif isinstance(model_input, pd.Series):
        values = model_input.tolist()
    else:
        values = list(model_input)
    return ["" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x) for x in values]


def log_translator(checkpoint_dir: str | Path, name: str = "translator", run=None):
    """Log the checkpoint as a pyfunc model of `run` (a `TrackedRun`; default: the active run), carrying
    mtcore's code with it. A models-from-code model (`translator_model.py`), not a pickled `Translator`."""
    if run is not None:
        mlflow.set_tracking_uri(run.uri)
        with mlflow.start_run(run_id=run.run_id):
            return log_translator(checkpoint_dir, name)
    import mtcore

    return mlflow.pyfunc.log_model(
        name=name,
        python_model=str(Path(__file__).with_name("translator_model.py")),
        artifacts={ARTIFACT: str(checkpoint_dir)},
        code_paths=[str(Path(mtcore.__file__).parent)],
        pip_requirements=["torch", "sentencepiece", "sacrebleu", "pyarrow", "pyyaml", "numpy", "pandas"],
        input_example=(["Open the file"], PARAMS),  # the params schema: without one MLflow drops `params`
    )


def register_translator(model_uri: str, name: str, tags: dict[str, str]) -> str:
    """Register a logged translator in the model registry; returns `NAME/VERSION`."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):  # MLflow prints "Successfully registered…" itself, even under -q
        version = mlflow.register_model(model_uri, name, tags=tags)
    log.info("registered %s version %s in the MLflow model registry", version.name, version.version)
    return f"{version.name}/{version.version}"
