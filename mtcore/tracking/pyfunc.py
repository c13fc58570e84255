"""An MLflow pyfunc model that translates a column of sentences with an mtcore checkpoint.

    mlflow models predict -m runs:/RUN_ID/translator -i in.csv -t csv --env-manager local

Input: a DataFrame with a `src` column (or the first column), a list of strings, or a Series.
Output: a list of translations. Beam size and batch size come from `params` when given.
"""

from __future__ import annotations

from pathlib import Path

import mlflow.pyfunc

ARTIFACT = "checkpoint"


class Translator(mlflow.pyfunc.PythonModel):
    # The input is deliberately untyped (a DataFrame, a Series or a list): no type-hint validation, and no
    # warning at class creation advising it.
    _skip_type_hint_validation = True

    def load_context(self, context):
        from mtcore.nmt.checkpoint import load_checkpoint

        self.ckpt = load_checkpoint(context.artifacts[ARTIFACT])

    def predict(self, context, model_input, params=None):
        from mtcore.nmt.decoding import translate

        texts = _texts(model_input)
        params = params or {}
        return translate(
            self.ckpt.model, self.ckpt.tokenizer, texts,
            beam=int(params.get("beam", 5)), batch_size=int(params.get("batch_size", 32)),
        )


def _texts(model_input) -> list[str]:
    import pandas as pd

    if isinstance(model_input, pd.DataFrame):
        column = "src" if "src" in model_input.columns else model_input.columns[0]
        return [str(x) for x in model_input[column].tolist()]
    if isinstance(model_input, pd.Series):
        return [str(x) for x in model_input.tolist()]
    return [str(x) for x in model_input]


def log_translator(checkpoint_dir: str | Path, name: str = "translator"):
    """Log the checkpoint as a pyfunc model of the active run, carrying mtcore's code with it.

    A models-from-code model (`translator_model.py`), not a pickled `Translator`."""
    import mtcore

    return mlflow.pyfunc.log_model(
        name=name,
        python_model=str(Path(__file__).with_name("translator_model.py")),
        artifacts={ARTIFACT: str(checkpoint_dir)},
        code_paths=[str(Path(mtcore.__file__).parent)],
        pip_requirements=["torch", "sentencepiece", "sacrebleu", "pyarrow", "pyyaml", "numpy", "pandas"],
        input_example=["Open the file"],
    )
