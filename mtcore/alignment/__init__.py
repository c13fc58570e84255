"""Sentence alignment: scoring pairs by embedding similarity, filtering corpora, aligning documents.

    from mtcore.alignment import FilterConfig, filter_corpus, align_documents
    filter_corpus("runs/clean/kept", "runs/align", FilterConfig(score="margin"))
    blocks = align_documents(en_sentences, vi_sentences, load_encoder("builtin"))
"""

from mtcore.alignment.documents import Block, DocAlignConfig, align_documents, read_document, strict_f1, write_alignment
from mtcore.alignment.filter import FilterConfig, FilterError, FilterResult, auto_threshold, filter_corpus, filter_table
from mtcore.alignment.scoring import cosine, knn_mean_similarity, margin_scores, normalized_cost, ratio_margin

__all__ = [
    "Block",
    "DocAlignConfig",
    "FilterConfig",
    "FilterError",
    "FilterResult",
    "align_documents",
    "auto_threshold",
    "cosine",
    "filter_corpus",
    "filter_table",
    "knn_mean_similarity",
    "margin_scores",
    "normalized_cost",
    "ratio_margin",
    "read_document",
    "strict_f1",
    "write_alignment",
]
