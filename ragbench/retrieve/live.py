"""A deployed plan over a changing corpus: its index-time values kept in memory and updated as
documents come and go.

``LiveExecution`` is the ``Execution`` a pipeline keeps (``ragbench.pipeline``): its values are
the plan's live index-time stages (``live_stages``: chunk sets, indexes, and document vectors a
query-time stage reads). ``extend`` adds documents and ``delete`` removes them, each stage by its
own incremental step (``Stage.update``: chunk sets are appended to per document, document
vectors computed for the new chunks, indexes extended in place, derived values recomputed when
read), every step under a telemetry span named after its stage. Query-time executions are
``provided`` with ``index_values``. With ``Execution.__getitem__`` this is the one place a stage
runs (``tests/test_architecture.py`` holds it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragbench import progress, telemetry
from ragbench.retrieve.artifacts import ChunkSet
from ragbench.retrieve.execution import Execution, describe
from ragbench.retrieve.graph import Env, Plan, Stage
from ragbench.types import Chunk, Document

__all__ = ["Extended", "LiveExecution", "live_stages"]


def live_stages(plan: Plan) -> list[Stage]:
    """The index-time stages a deployed ``plan`` keeps in memory and updates (chunk sets,
    indexes, and document vectors a query-time stage reads) or keeps as they are (``fixed``:
    trained models); the others are recomputed from these (``derive``) or needed only while
    documents are added (``batch``)."""
    read = {i for s in plan.stages.values() if not s.index for i in s.inputs}
    return [
        s
        for s in plan.index_stages()
        if s.update in ("append", "extend", "fixed") or (s.update == "batch" and s.name in read)
    ]


@dataclass
class Extended:
    """What ``LiveExecution.extend`` added: per document, the ids of its chunks in each chunk
    set (by stage); the documents it left out, with why; the batch's values of the stages the
    indexes were extended from (``batch``: its chunk sets, document vectors, ...), which a
    collection keeps to rebuild its indexes after a crash; and the chunk ids it removed."""

    chunks: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)
    batch: dict[str, Any] = field(default_factory=dict)
    removed: dict[str, list[str]] = field(default_factory=dict)


class LiveExecution(Execution):
    """The index-time values of ``plan`` over a corpus that changes (``provided``: the live
    values to start from, ``documents``: the corpus so far, kept only when a derived stage
    reads it, as a ``window`` postprocess does)."""

    def __init__(
        self,
        plan: Plan,
        env: Env,
        provided: Mapping[str, Any] | None = None,
        documents: Iterable[Document] = (),
    ) -> None:
        super().__init__(plan, env, provided=provided)
        derived = [s for s in plan.index_stages() if s.update == "derive"]
        reads = any("corpus" in s.inputs for s in derived)
        self._documents = {d.id: d for d in documents} if reads else None

    def __getitem__(self, name: str) -> Any:
        if name == "corpus" and self._documents is not None:
            return list(self._documents.values())
        return super().__getitem__(name)

    def chunked(self, docs: Sequence[Document]) -> dict[str, ChunkSet]:
        """What each chunk set's stage makes of ``docs``, recording nothing (to embed their
        chunks elsewhere first)."""
        stages = [s for s in self.plan.index_stages() if s.update == "append"]
        return {s.name: s.compute(self.env, list(docs)) for s in stages}

    def batch_value(self, name: str, batch: Mapping[str, Any]) -> Any:
        """The value of the batch stage ``name`` computed again from a batch's other values
        (its chunk sets), as ``extend`` computed it."""
        stage = self.plan.stages[name]
        inputs = [batch[i] if i in batch else self[i] for i in stage.inputs]
        return self._step(stage, stage.compute, self.env, *inputs)

    def keep(self, values: Mapping[str, Any]) -> None:
        """Hold ``values`` for the stages that hold none yet (a run's trained models)."""
        for name, value in values.items():
            if self._values.get(name) is None:
                self._values[name] = value

    def documents(self) -> list[Document] | None:
        """The corpus so far when a derived stage reads it (a collection saves it), else None."""
        return None if self._documents is None else list(self._documents.values())

    def live_values(self) -> dict[str, Any]:
        """The values of the live stages held now (by stage; a dropped batch value is None)."""
        return {
            s.name: self._values[s.name] for s in live_stages(self.plan) if s.name in self._values
        }

    def index_values(self) -> dict[str, Any] | None:
        """What a query-time execution of the plan is ``provided`` with: the live values (a
        dropped batch value as None) and the derived ones, computed from them; None while a
        live value is missing (nothing indexed yet)."""
        live = live_stages(self.plan)
        if any(self._values.get(s.name) is None for s in live if s.update != "batch"):
            return None
        found = {s.name: self._values.get(s.name) for s in live}
        found |= {s.name: self[s.name] for s in self.plan.index_stages() if s.update == "derive"}
        return found

    def chunk_ids(self) -> dict[str, dict[str, list[str]]]:
        """Per document, the ids of its chunks in each live chunk set (by stage)."""
        found: dict[str, dict[str, list[str]]] = {}
        for stage in self.plan.index_stages():
            if stage.update == "append" and self._values.get(stage.name) is not None:
                for chunk in self._values[stage.name].chunks:
                    found.setdefault(chunk.doc_id, {}).setdefault(stage.name, []).append(chunk.id)
        return found

    def extend(
        self, docs: Sequence[Document], replacing: Collection[str] = (), number: int = 0
    ) -> Extended:
        """Add ``docs`` to the live values, each stage by its ``update`` step (as batch
        ``number`` of an ingest: a stored chunk set records it).

        A document that fails to chunk is left out; when a batch step fails (embedding) none
        is added and nothing changes. The documents of ``replacing`` lose their old chunks,
        only once their new ones are ready (a new version that fails keeps the old one).
        """
        done = Extended()
        batch = self._chunk(docs, done)
        stages = self.plan.index_stages()
        try:
            batch |= self._fixed(docs)
            for stage in stages:
                if stage.update == "batch" and any(stage.name in s.inputs for s in stages):
                    inputs = [batch[i] for i in stage.inputs]
                    batch[stage.name] = self._step(stage, stage.compute, self.env, *inputs)
        except Exception as exc:  # keep the old versions, report the failure
            done.errors += [(doc_id, f"embedding failed: {exc}") for doc_id in done.chunks]
            done.chunks.clear()
            return done
        added = {doc.id: doc for doc in docs if doc.id in done.chunks}
        done.removed = self.delete([doc_id for doc_id in added if doc_id in replacing])
        if self._documents is not None:
            self._documents.update(added)
        for stage in stages:
            self._grow(stage, batch, number)
        done.batch = batch
        return done

    def replay(self, batch: Mapping[str, Any], removed: Mapping[str, list[str]]) -> None:
        """Bring the indexes up to date with a batch an ingest committed after they were
        saved: its ``removed`` chunk ids (by chunk set) deleted from them, then the batch's
        values (its chunk sets and document vectors, as ``Extended.batch`` held them) added.
        The chunk sets themselves, kept in a store, have them already."""
        for stage in self.plan.index_stages():
            if stage.update != "extend" or not all(i in batch for i in stage.inputs):
                continue
            live = self._values.get(stage.name)
            gone = sorted({c for i in stage.inputs for c in removed.get(i, ())})
            if gone and live is not None:
                live.delete(gone)
            if all(len(batch[i]) for i in stage.inputs if isinstance(batch[i], ChunkSet)):
                self._grow(stage, batch, 0)

    def delete(self, doc_ids: Collection[str]) -> dict[str, list[str]]:
        """Remove the documents ``doc_ids`` from the live values — their chunks from each chunk
        set and from the indexes over it — and return the chunk ids removed per chunk set."""
        gone = set(doc_ids)
        if self._documents is not None:
            for doc_id in gone:
                self._documents.pop(doc_id, None)
        removed: dict[str, list[str]] = {}
        kept: dict[str, ChunkSet] = {}
        for stage in self.plan.index_stages():
            live = self._values.get(stage.name)
            if stage.update == "append" and live is not None and gone:
                kept[stage.name], removed[stage.name] = live.removing(gone)
        if not any(removed.values()):
            return removed
        for stage in self.plan.index_stages():
            live = self._values.get(stage.name)
            if stage.name in kept:
                self._values[stage.name] = kept[stage.name]
            elif stage.update == "extend" and live is not None:
                live.delete(sorted({c for i in stage.inputs for c in removed.get(i, ())}))
            else:
                self._forget(stage)
        return removed

    def _chunk(self, docs: Sequence[Document], done: Extended) -> dict[str, Any]:
        """The chunk sets (``append`` stages) of the documents that chunk, each document
        chunked alone; one that fails in any chunking is left out (``done.errors``)."""
        stages = [s for s in self.plan.index_stages() if s.update == "append"]
        per_doc: list[dict[str, list[Chunk]] | None] = [{} for _ in docs]
        failed: dict[int, str] = {}

        def chunk(stage: Stage) -> ChunkSet:
            for at, doc in enumerate(docs):
                if (found := per_doc[at]) is not None:
                    try:
                        found[stage.name] = list(stage.compute(self.env, [doc]).chunks)
                    except Exception as exc:  # one bad document must not stop the rest
                        per_doc[at], failed[at] = None, f"chunking failed: {exc}"
            return ChunkSet(
                [c for found in per_doc if found is not None for c in found[stage.name]]
            )

        for stage in stages:
            self._step(stage, chunk, stage)
        done.errors += [(docs[at].id, why) for at, why in sorted(failed.items())]
        fresh = {d.id: found for d, found in zip(docs, per_doc, strict=True) if found is not None}
        for doc_id, found in fresh.items():
            done.chunks[doc_id] = {name: [c.id for c in chunks] for name, chunks in found.items()}
        return {s.name: ChunkSet([c for f in fresh.values() for c in f[s.name]]) for s in stages}

    def _fixed(self, docs: Sequence[Document]) -> dict[str, Any]:
        """The ``fixed`` values (trained models): those held, the others computed now over
        the first documents given."""
        found = {}
        for stage in self.plan.index_stages():
            if stage.update == "fixed":
                if self._values.get(stage.name) is None:
                    sources = {"corpus": list(docs)}
                    inputs = [sources.get(i) or self[i] for i in stage.inputs]
                    self._values[stage.name] = self._step(stage, stage.compute, self.env, *inputs)
                found[stage.name] = self._values[stage.name]
        return found

    def _step(self, stage: Stage, run: Callable[..., Any], *args: Any) -> Any:
        """``run(*args)``: one incremental step of ``stage``, under its span."""
        with telemetry.span(
            stage.name, key=stage.key, area=stage.area, update=stage.update
        ) as span:
            with progress.doing(stage.name):
                value = run(*args)
            if span.recording:
                describe(span, stage, value, 0)
        return value

    def _grow(self, stage: Stage, batch: Mapping[str, Any], number: int) -> None:
        """Bring the live value of ``stage`` up to date with the new documents' ``batch``
        (batch ``number`` of an ingest)."""
        live = self._values.get(stage.name)
        if stage.update == "append":
            self._values[stage.name] = (
                batch[stage.name] if live is None else live.extended(batch[stage.name], number)
            )
        elif stage.update == "extend":
            inputs = [batch[i] for i in stage.inputs]
            if live is None or stage.extend is None:  # the first documents: built
                self._values[stage.name] = self._step(stage, stage.compute, self.env, *inputs)
            else:
                self._values[stage.name] = self._step(stage, stage.extend, live, *inputs)
        else:
            self._forget(stage)

    def _forget(self, stage: Stage) -> None:
        """Drop a value a change made stale: a batch value is then known as missing (None: a
        query-time reader computes what it needs), a derived one is recomputed when read."""
        if stage.name not in self._values:
            return
        if stage.update == "batch":
            self._values[stage.name] = None
        elif stage.update == "derive":
            del self._values[stage.name]
