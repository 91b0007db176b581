"""Labeled retrieval sets: load them (BEIR, span-labeled, chunking_evaluation, a plain folder of
documents with hand-written labels, DataFrames), check them, describe them, download the public
BEIR sets, import ragas test sets, and read or write TREC files.

``load_dataset("demo")`` or ``load_dataset("path/to/set")`` is the usual entry point. Names are
imported lazily, so ``import ragbench.data.labeled`` stays cheap.
"""

from __future__ import annotations

from ragbench.lazy import lazy_exports

_EXPORTS = {
    "Evidence": "ragbench.data.labeled",
    "LabeledSet": "ragbench.data.labeled",
    "Qrels": "ragbench.data.labeled",
    "DATASETS": "ragbench.data.catalog",
    "FORMATS": "ragbench.data.catalog",
    "detect_format": "ragbench.data.catalog",
    "load_dataset": "ragbench.data.catalog",
    "resolve_dataset": "ragbench.data.catalog",
    "load_beir": "ragbench.data.beir",
    "load_spans": "ragbench.data.spans",
    "load_folder": "ragbench.data.folder",
    "load_chunking_eval": "ragbench.data.chunking_eval",
    "from_frames": "ragbench.data.frames",
    "RagasImport": "ragbench.data.ragas_import",
    "import_ragas": "ragbench.data.ragas_import",
    "Problem": "ragbench.data.problems",
    "ValidationReport": "ragbench.data.validate",
    "validate_dataset": "ragbench.data.validate",
    "DatasetSummary": "ragbench.data.summary",
    "summarize": "ragbench.data.summary",
    "BEIR_DATASETS": "ragbench.data.download",
    "data_dir": "ragbench.data.download",
    "download_beir": "ragbench.data.download",
    "read_qrels": "ragbench.data.trec",
    "read_run": "ragbench.data.trec",
    "write_qrels": "ragbench.data.trec",
    "write_run": "ragbench.data.trec",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, globals(), _EXPORTS)
