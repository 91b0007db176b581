"""RAGPipeline: index documents, keep them up to date, retrieve, and expose retrieval as a tool.

For applications and notebooks. Re-indexing a document id replaces its chunks (the old version
stays if the new one fails to chunk or embed); unchanged documents (same content hash) are not
re-embedded; a pipeline saves to a directory (dense store + BM25 + chunk table + config) and
reopens in another process, which is what ``ragbench ingest`` / ``ragbench search`` use.
"""

from __future__ import annotations

import html
import json
import os
import secrets
import shutil
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragbench.errors import ConfigError, DataError
from ragbench.index.sparse import BM25Config, BM25Index
from ragbench.protocols import Chunker, DenseStore, Embedder, Fusion, Reranker
from ragbench.registry import component_field, format_validation_error, registry
from ragbench.retrieve.assemble import quote_untrusted, sanitize_attribute, system_notice
from ragbench.retrieve.retriever import Retriever
from ragbench.text.chunkers import chunk_documents
from ragbench.types import Chunk, Document, Hit

__all__ = ["IndexReport", "PipelineConfig", "RAGPipeline", "RetrievalTool"]

_BATCH_DOCS = 64


def _spec(family: str, spec: Mapping[str, Any]) -> Any:
    return Field(default_factory=lambda: registry(family).parse(dict(spec)))


class PipelineConfig(BaseModel):
    """Everything needed to rebuild a pipeline: one spec per component."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    chunker: component_field("chunker") = _spec(  # type: ignore[valid-type]
        "chunker", {"kind": "recursive", "size": 800, "overlap": 100}
    )
    embedder: component_field("embedder") = _spec(  # type: ignore[valid-type]
        "embedder", {"kind": "sentence-transformers"}
    )
    store: component_field("dense") = _spec("dense", {"kind": "hnsw"})  # type: ignore[valid-type]
    bm25: BM25Config | None = Field(default_factory=BM25Config)
    fusion: component_field("fusion") = _spec("fusion", {"kind": "rrf"})  # type: ignore[valid-type]
    reranker: component_field("reranker") | None = None  # type: ignore[valid-type]
    depth: int = Field(50, gt=0)
    score_threshold: float | None = None


@dataclass
class IndexReport:
    """What one ``index`` call did."""

    documents_loaded: int = 0
    documents_indexed: int = 0
    documents_unchanged: int = 0
    chunks_created: int = 0
    chunks_stored: int = 0
    chunks_removed: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)
    duration_s: float = 0.0

    def __str__(self) -> str:
        lines = [
            f"documents loaded {self.documents_loaded}, indexed {self.documents_indexed}, "
            f"unchanged {self.documents_unchanged}",
            f"chunks created {self.chunks_created}, stored {self.chunks_stored}, "
            f"removed {self.chunks_removed}",
            f"errors {len(self.errors)}, {self.duration_s:.1f} s",
        ]
        lines += [f"  {where}: {why}" for where, why in self.errors]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(str(self)) + "</pre>"


@dataclass(frozen=True)
class RetrievalTool:
    """Retrieval as an agent tool: a plain callable plus its JSON schema.

    Results are framed as untrusted data inside a delimiter that is random per call, so text in
    a document cannot guess and forge the closing tag.
    """

    name: str
    description: str
    schema: dict[str, Any]
    pipeline: RAGPipeline
    format: Literal["markdown", "json", "text"] = "markdown"
    k: int = 5

    def __call__(self, query: str, k: int | None = None) -> str:
        """Retrieve for ``query`` and render the hits as framed, untrusted context."""
        hits = self.pipeline.retrieve(query, k or self.k)
        tag = f"retrieved_{secrets.token_hex(6)}"
        if self.format == "json":
            return json.dumps(
                {
                    "notice": system_notice(tag),
                    "results": [
                        {
                            "rank": h.rank,
                            "score": round(h.score, 6),
                            "doc_id": sanitize_attribute(h.chunk.doc_id),
                            "chunk_id": sanitize_attribute(h.chunk.id),
                            "text": f"<{tag}>\n{quote_untrusted(h.chunk.text, tag)}\n</{tag}>",
                        }
                        for h in hits
                    ],
                },
                ensure_ascii=False,
            )
        blocks = []
        for h in hits:
            attrs = f'rank="{h.rank}" doc_id="{sanitize_attribute(h.chunk.doc_id)}"'
            body = quote_untrusted(h.chunk.text, tag)
            block = f"<{tag} {attrs}>\n{body}\n</{tag}>"
            if self.format == "markdown":
                block = f"**Result {h.rank}** (score {h.score:.3f})\n\n{block}"
            blocks.append(block)
        if not blocks:
            blocks.append("No results.")
        return system_notice(tag) + "\n\n" + "\n\n".join(blocks)


class RAGPipeline:
    """Chunker + embedder + dense store (+ BM25, fusion, reranker) over a changing corpus."""

    def __init__(
        self,
        chunker: Chunker,
        embedder: Embedder,
        store: DenseStore,
        bm25: BM25Index | None = None,
        fusion: Fusion | None = None,
        reranker: Reranker | None = None,
        *,
        depth: int = 50,
        score_threshold: float | None = None,
        config: PipelineConfig | None = None,
    ) -> None:
        self.chunker, self.embedder = chunker, embedder
        self.retriever = Retriever(
            embedder, store, bm25, fusion, reranker, depth=depth, score_threshold=score_threshold
        )
        self.config = config
        self.chunks: dict[str, Chunk] = {}
        self._docs: dict[str, tuple[str, list[str]]] = {}  # doc id → (content hash, chunk ids)

    @classmethod
    def from_config(cls, config: PipelineConfig | Mapping[str, Any] | None = None) -> RAGPipeline:
        """Build every component from specs (the form a saved collection records)."""
        if not isinstance(config, PipelineConfig):
            try:
                config = PipelineConfig.model_validate(dict(config or {}))
            except ValidationError as exc:
                raise ConfigError(format_validation_error("pipeline", exc)) from None
        build = lambda family, spec: registry(family).build(spec)  # noqa: E731
        return cls(
            build("chunker", config.chunker),
            build("embedder", config.embedder),
            build("dense", config.store),
            BM25Index(config.bm25) if config.bm25 is not None else None,
            build("fusion", config.fusion) if config.bm25 is not None else None,
            build("reranker", config.reranker) if config.reranker is not None else None,
            depth=config.depth,
            score_threshold=config.score_threshold,
            config=config,
        )

    @property
    def document_ids(self) -> list[str]:
        """Ids of the indexed documents."""
        return list(self._docs)

    def index(self, source: Iterable[Document]) -> IndexReport:
        """Add new and changed documents; unchanged ones are skipped, failures reported."""
        started = time.perf_counter()
        report = IndexReport()
        batch: list[Document] = []
        for doc in source:
            report.documents_loaded += 1
            known = self._docs.get(doc.id)
            if known is not None and known[0] == doc.hash:
                report.documents_unchanged += 1
                continue
            batch.append(doc)
            if len(batch) >= _BATCH_DOCS:
                self._index_batch(batch, report)
                batch = []
        self._index_batch(batch, report)
        problems = getattr(getattr(source, "report", None), "problems", [])
        report.errors.extend((p.path, p.reason) for p in problems)
        report.duration_s = time.perf_counter() - started
        return report

    def update(self, document: Document) -> IndexReport:
        """Re-index one document (its old chunks are replaced only if the new ones embed)."""
        return self.index([document])

    def _index_batch(self, docs: Sequence[Document], report: IndexReport) -> None:
        chunked: list[tuple[Document, list[Chunk]]] = []
        for doc in docs:
            try:
                chunked.append((doc, chunk_documents(self.chunker, [doc])))
            except Exception as exc:  # one bad document must not stop the rest
                report.errors.append((doc.id, f"chunking failed: {exc}"))
        chunks = [c for _, cs in chunked for c in cs]
        if not chunks and not chunked:
            return
        try:
            vectors = self.embedder.embed([c.text for c in chunks], "document") if chunks else None
        except Exception as exc:  # keep the old versions, report the failure
            report.errors.extend((doc.id, f"embedding failed: {exc}") for doc, _ in chunked)
            return
        old = [cid for doc, _ in chunked if doc.id in self._docs for cid in self._docs[doc.id][1]]
        report.chunks_removed += len(old)
        self._drop(old)
        self.retriever.add(chunks, vectors)
        for doc, cs in chunked:
            self._docs[doc.id] = (doc.hash, [c.id for c in cs])
        self.chunks.update((c.id, c) for c in chunks)
        report.documents_indexed += len(chunked)
        report.chunks_created += len(chunks)
        report.chunks_stored += len(chunks)

    def _drop(self, chunk_ids: Sequence[str]) -> None:
        if chunk_ids:
            self.retriever.delete(chunk_ids)
            for cid in chunk_ids:
                self.chunks.pop(cid, None)

    def delete_document(self, doc_id: str) -> int:
        """Remove a document and its chunks; returns the number of chunks removed."""
        known = self._docs.pop(doc_id, None)
        if known is None:
            return 0
        self._drop(known[1])
        return len(known[1])

    def retrieve(
        self, query: str, k: int = 5, filter: Mapping[str, Any] | None = None
    ) -> list[Hit]:
        """The top-``k`` chunks for ``query`` (metadata ``filter`` is an exact match)."""
        ranking = self.retriever.search([query], k, filter).ranking
        return [
            Hit(self.chunks[cid], score, rank)
            for rank, (cid, score) in enumerate(ranking.row(0), start=1)
        ]

    def as_tool(
        self,
        name: str = "search_documents",
        description: str = "Search the indexed documents and return relevant passages.",
        format: Literal["markdown", "json", "text"] = "markdown",
        k: int = 5,
    ) -> RetrievalTool:
        """Retrieval as a callable tool with a JSON schema for function calling."""
        schema = {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for."},
                    "k": {"type": "integer", "minimum": 1, "maximum": 50, "default": k},
                },
                "required": ["query"],
            },
        }
        return RetrievalTool(name, description, schema, self, format, k)

    def save(self, path: Path | str) -> None:
        """Write the collection to ``path`` atomically (replacing an older copy)."""
        if self.config is None:
            raise ValueError("only pipelines built with from_config can be saved")
        target = Path(path)
        tmp = target.with_name(f".tmp-{uuid.uuid4().hex}-{target.name}")
        tmp.mkdir(parents=True)
        (tmp / "pipeline.json").write_text(self.config.model_dump_json(indent=2), "utf-8")
        with (tmp / "chunks.jsonl").open("w", encoding="utf-8") as fh:
            for c in self.chunks.values():
                row = [c.id, c.doc_id, c.index, c.start, c.end, c.text, c.metadata]
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        docs = {d: {"hash": h, "chunks": ids} for d, (h, ids) in self._docs.items()}
        (tmp / "documents.json").write_text(json.dumps(docs), "utf-8")
        self.retriever.store.save(tmp / "dense")  # type: ignore[union-attr]
        if self.retriever.sparse is not None:
            self.retriever.sparse.save(tmp / "bm25")
        old = target.with_name(f".old-{uuid.uuid4().hex}-{target.name}")
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)

    @classmethod
    def open(cls, path: Path | str) -> RAGPipeline:
        """Reopen a collection written by ``save``."""
        root = Path(path)
        if not (root / "pipeline.json").is_file():
            raise DataError(f"{root}: not a ragbench collection (no pipeline.json)")
        config = PipelineConfig.model_validate_json((root / "pipeline.json").read_text("utf-8"))
        pipeline = cls.from_config(config)
        retriever = pipeline.retriever
        retriever.store = type(retriever.store).load(root / "dense")  # type: ignore[attr-defined]
        if retriever.sparse is not None:
            retriever.sparse = BM25Index.load(root / "bm25")
        with (root / "chunks.jsonl").open(encoding="utf-8") as fh:
            for line in fh:
                cid, doc_id, index, start, end, text, meta = json.loads(line)
                pipeline.chunks[cid] = Chunk(cid, doc_id, index, start, end, text, meta)
        retriever.texts = {cid: c.text for cid, c in pipeline.chunks.items()}
        docs = json.loads((root / "documents.json").read_text("utf-8"))
        pipeline._docs = {d: (v["hash"], v["chunks"]) for d, v in docs.items()}
        return pipeline

    def __repr__(self) -> str:
        return f"RAGPipeline(documents={len(self._docs)}, chunks={len(self.chunks)})"
