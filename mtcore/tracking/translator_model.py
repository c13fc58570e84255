"""The logged translator as a models-from-code model: MLflow runs this file to build it.

Loading a model from the store then runs only mtcore's own code (this file and the code
logged with it), never a cloudpickled object that could carry anything.
"""

import mlflow

from mtcore.tracking.pyfunc import Translator

mlflow.models.set_model(Translator())
