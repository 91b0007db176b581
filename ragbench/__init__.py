"""ragbench: evaluate and tune RAG retrieval — chunkers, embedders, BM25, fusion, rerankers.

Names are imported lazily, so ``import ragbench.evaluate.metrics`` stays cheap.
"""

from __future__ import annotations

from ragbench.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "Chunk": "ragbench.types",
    "Document": "ragbench.types",
    "Hit": "ragbench.types",
    "Query": "ragbench.types",
    "Ranking": "ragbench.types",
    "content_hash": "ragbench.types",
    "ConfigError": "ragbench.errors",
    "DataError": "ragbench.errors",
    "RagbenchError": "ragbench.errors",
    "components": "ragbench.registry",
    "build_chunker": "ragbench.text.chunkers",
    "chunk_documents": "ragbench.text.chunkers",
    "load": "ragbench.text.loaders",
    "load_dataset": "ragbench.data",
    "LabeledSet": "ragbench.data",
    "RAGPipeline": "ragbench.pipeline",
    "load_config": "ragbench.experiment.config",
    "run": "ragbench.experiment.runner",
    "dry_run": "ragbench.experiment.runner",
    "RunResult": "ragbench.experiment.runner",
    "evaluate": "ragbench.evaluate.metrics",
    "evaluate_run": "ragbench.evaluate.metrics",
    "Report": "ragbench.report.report",
    "FinetuneConfig": "ragbench.index.finetune",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, globals(), _EXPORTS)
