"""Any sentence-transformers model (e.g. LaBSE) as an mtcore encoder, strictly offline.

Loading never downloads: `HF_HUB_OFFLINE=1` / `TRANSFORMERS_OFFLINE=1` are set and
`local_files_only=True` is passed, so a model missing from the local cache fails at
once with instructions, instead of hanging on a network that is not there.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mtcore.embedding.encoder import EncoderError


class EncoderNotAvailable(EncoderError):
    """An external encoder that cannot be loaded here; the message says how to get it."""


def how_to_get(name: str) -> str:
    return (
        f"To use it: `pip install sentence-transformers`, then fetch the model once on a machine with network access "
        f"(`python -c \"from sentence_transformers import SentenceTransformer; SentenceTransformer('{name}')\"` fills "
        f"the Hugging Face cache, ~/.cache/huggingface, or set HF_HOME), or save it with `model.save(DIR)` and pass "
        f"`--encoder DIR`. Or use the built-in encoder: `--encoder builtin`."
    )


class SentenceTransformerEncoder:
    """Adapter with the built-in encoder's interface: `encode(texts) -> (N, dim)` unit rows."""

    kind = "sentence-transformers"

    def __init__(self, name_or_path: str, device: str | None = None):
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise EncoderNotAvailable(
                f"encoder '{name_or_path}' needs the sentence-transformers package, which is not installed. "
                + how_to_get(name_or_path)
            ) from None
        local = Path(name_or_path).expanduser()
        try:
            self.model = SentenceTransformer(
                str(local) if local.exists() else name_or_path, device=device, local_files_only=True
            )
        except Exception as err:  # OSError, ValueError, HF hub errors: all mean "not here"
            raise EncoderNotAvailable(
                f"encoder '{name_or_path}' is not available offline (not a local directory, not in the Hugging Face "
                f"cache): {type(err).__name__}: {err}. " + how_to_get(name_or_path)
            ) from None
        self.name = name_or_path
        self.dim = int(self.model.get_sentence_embedding_dimension() or 0)

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        out = self.model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float32)
