"""Judge pooled results by hand and record the judgements in the labeled set.

A sweep's trials each rank documents for a query; labels written by hand (or generated) judge
only some of them. ``pool`` reads one or more run directories and gives, for one query, the
union of every trial's top ``k`` documents — each once, with which trials found it and at what
rank — so a person can judge what the configurations actually retrieve. ``QueriesFile``
records those judgements in the labeled set's ``queries.jsonl`` (a plain folder's, or a
span-labeled set's) at the document level, ``relevant`` (``qrels`` on lines that use the span
format's spelling) with grades 0 (not relevant), 1 (partly) or 2 (relevant): merged into the
query's line, or appended as a new line for a query the file does not have. Each write goes to
a temporary file that is read back with the set's own reader (so ``ragbench datasets
validate`` accepts it) and then renamed over the original, under a lock. A document that is
one of the query's evidence documents keeps the grade its evidence gives.

``record_grades`` writes several grades of a query at once (a new line may name its split).

``Judge`` puts both together for one labeled set and its runs; ``JudgingWidget`` shows it in a
notebook (``ipywidgets``): a query's pooled hits with a button per grade, and previous / next.
``ragbench.report.judged`` judges a generated set's own queries in a terminal, into a split of
their own.

A trial's documents come from ``runs/<trial>.trec`` when the run was evaluated at the document
level (its ranking to the evaluation depth), else from ``runs/<trial>.top.parquet`` (the
documents of its top chunks, five chunks per query). Excerpts are the text of a document's best
ranked chunk in any trial's top chunks, else the document's beginning.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock, Timeout

from ragbench.data.catalog import dataset_format, load_dataset, resolve_dataset
from ragbench.data.folder import QUERIES
from ragbench.data.problems import ProblemLog, jsonl_records
from ragbench.data.spans import JudgedQuery, check_splits, read_queries
from ragbench.data.trec import read_run
from ragbench.errors import ConfigError, DataError, RagbenchError
from ragbench.experiment.evaluation import EXCERPT
from ragbench.experiment.store import RunStore

__all__ = [
    "GRADES",
    "Finding",
    "Judge",
    "JudgingWidget",
    "Pool",
    "PooledHit",
    "QueriesFile",
    "pool",
]

StrPath = str | os.PathLike[str]

GRADES = {0: "not relevant", 1: "partly", 2: "relevant"}
"""The grades a judgement records, with their names."""


# ---------------------------------------------------------------- pooling


@dataclass(frozen=True)
class Finding:
    """One trial that found a document: its run directory, id, label and document rank."""

    run: str
    trial_id: str
    label: str
    rank: int


@dataclass(frozen=True)
class PooledHit:
    """A pooled document: the trials that found it (best rank first) and an excerpt."""

    doc_id: str
    found: tuple[Finding, ...]
    excerpt: str | None

    @property
    def best_rank(self) -> int:
        """The best rank any trial gave the document."""
        return self.found[0].rank


@dataclass(frozen=True)
class Pool:
    """A query's pooled hits, best rank first (then the most trials, then the id)."""

    query_id: str
    text: str
    hits: tuple[PooledHit, ...]
    runs: tuple[str, ...]

    def found_by(self, hit: PooledHit) -> str:
        """Who found ``hit``: ``label @rank``, best first (``run: label @rank`` when the pool
        is of several runs)."""
        named = len(self.runs) > 1
        return "; ".join(
            (f"{f.run}: " if named else "") + f"{f.label} @{f.rank}" for f in hit.found
        )

    def frame(self) -> pd.DataFrame:
        """One row per document: doc_id, best_rank, trials (how many found it), found_by
        and excerpt."""
        rows = [
            {
                "doc_id": hit.doc_id,
                "best_rank": hit.best_rank,
                "trials": len(hit.found),
                "found_by": self.found_by(hit),
                "excerpt": hit.excerpt,
            }
            for hit in self.hits
        ]
        columns = ["doc_id", "best_rank", "trials", "found_by", "excerpt"]
        return pd.DataFrame(rows, columns=columns)


class _Run:
    """The parts of a run directory pooling reads, each read once."""

    def __init__(self, path: StrPath) -> None:
        self.store = RunStore(Path(path))
        self.name = self.store.path.name
        manifest = self.store.manifest()
        self.split = str(manifest["dataset"]["split"])
        self.document_level = manifest["evaluation"]["level"] == "document"
        trials = self.store.trials()
        ok = trials[trials["status"] == "ok"] if not trials.empty else trials
        self.labels: dict[str, str] = dict(zip(ok["trial_id"], ok["label"], strict=True))
        self._rankings: dict[str, dict[str, list[str]]] = {}
        self._top: dict[str, pd.DataFrame] = {}

    @cached_property
    def queries(self) -> pd.DataFrame:
        """``queries.parquet`` indexed by query id."""
        return self.store.queries().set_index("query_id")

    def top(self, trial_id: str) -> pd.DataFrame:
        """The trial's top chunks (``runs/<trial>.top.parquet``; empty when missing)."""
        if trial_id not in self._top:
            path = self.store.path / "runs" / f"{trial_id}.top.parquet"
            self._top[trial_id] = self.store.top(trial_id) if path.is_file() else pd.DataFrame()
        return self._top[trial_id]

    def ranking(self, trial_id: str, query_id: str) -> list[str]:
        """The trial's documents for the query, best first."""
        if not self.document_level:
            top = self.top(trial_id)
            if top.empty:
                return []
            chunks = top[top["query_id"] == query_id].sort_values("rank")
            return list(dict.fromkeys(chunks["doc_id"]))
        if trial_id not in self._rankings:
            run = read_run(self.store.path / "runs" / f"{trial_id}.trec")
            self._rankings[trial_id] = {  # trec_eval's order: score, then doc id, descending
                qid: [d for d, _ in sorted(docs.items(), key=lambda p: (p[1], p[0]), reverse=True)]
                for qid, docs in run.items()
            }
        return self._rankings[trial_id].get(query_id, [])

    def excerpts(self, trial_id: str, query_id: str) -> dict[str, tuple[int, str]]:
        """Document → (chunk rank, text) of its best chunk among the trial's top chunks."""
        top = self.top(trial_id)
        if top.empty:
            return {}
        chunks = top[top["query_id"] == query_id].sort_values("rank", ascending=False)
        return {
            d: (int(r), str(t))
            for d, r, t in zip(chunks["doc_id"], chunks["rank"], chunks["text"], strict=True)
        }


def _pool(runs: Sequence[_Run], query_id: str, k: int, trials: Sequence[str] | None) -> Pool:
    """The pool of ``query_id`` over ``runs`` (see ``pool``)."""
    if k < 1:
        raise ConfigError(f"k: expected a positive number of documents per trial, got {k}")
    text: str | None = None
    found: dict[str, list[Finding]] = {}
    excerpts: dict[str, tuple[int, str]] = {}
    for run in runs:
        if query_id not in run.queries.index:
            continue
        text = text if text is not None else str(run.queries.at[query_id, "text"])
        for trial_id, label in run.labels.items():
            if trials is not None and trial_id not in trials:
                continue
            for rank, doc_id in enumerate(run.ranking(trial_id, query_id)[:k], start=1):
                found.setdefault(doc_id, []).append(Finding(run.name, trial_id, label, rank))
            for doc_id, best in run.excerpts(trial_id, query_id).items():
                if doc_id not in excerpts or best[0] < excerpts[doc_id][0]:
                    excerpts[doc_id] = best
    if text is None:
        where = ", ".join(str(r.store.path) for r in runs)
        raise DataError(f"{where}: no query {query_id!r} in the run(s)")
    hits = [
        PooledHit(doc_id, tuple(sorted(f, key=lambda x: x.rank)), _text(excerpts.get(doc_id)))
        for doc_id, f in found.items()
    ]
    hits.sort(key=lambda h: (h.best_rank, -len(h.found), h.doc_id))
    return Pool(query_id, text, tuple(hits), tuple(run.name for run in runs))


def _text(excerpt: tuple[int, str] | None) -> str | None:
    return excerpt[1] if excerpt is not None else None


def pool(
    runs: StrPath | Sequence[StrPath],
    query_id: str,
    k: int = 5,
    trials: Sequence[str] | None = None,
) -> Pool:
    """The pooled hits of ``query_id``: the union of the top ``k`` documents of every finished
    trial (or of the trial ids in ``trials``) of the run directories ``runs``."""
    paths = [runs] if isinstance(runs, str | os.PathLike) else list(runs)
    return _pool([_Run(p) for p in paths], query_id, k, trials)


# ---------------------------------------------------------------- recording


class QueriesFile:
    """The queries file of a labeled set (a plain folder's ``queries.jsonl`` or ``queries``,
    or a span-labeled set's ``queries.jsonl``) and its documents (those of split ``split``'s
    set), to read judgements from and record them in."""

    def __init__(
        self, labels: StrPath, queries: StrPath | None = None, split: str = "test"
    ) -> None:
        root = resolve_dataset(labels)
        fmt = dataset_format(root, None, queries)
        if fmt not in ("folder", "spans"):
            raise ConfigError(
                f"{root}: judgements are recorded in a queries.jsonl (a plain folder of documents "
                f"or a span-labeled set), and this is a {fmt} set"
            )
        self.path = Path(queries) if queries is not None else root / QUERIES
        self._folder = f"{root.resolve().name}/" if fmt == "folder" else "corpus/"
        labeled = load_dataset(root, split=split, queries=queries)
        self.documents = labeled.documents
        self.doc_index = labeled.doc_index
        digest = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:16]
        self._lock = FileLock(Path(tempfile.gettempdir()) / f"ragbench-judging-{digest}.lock")

    def read(self) -> dict[str, JudgedQuery]:
        """Every judged query of the file (all splits), by id."""
        found = read_queries(self.path, self.documents, self._folder, ProblemLog(strict=True))
        return {q.query.id: q for q in found}

    def grades(self, query_id: str) -> dict[str, int]:
        """The query's judged documents and their grades (evidence documents included)."""
        judged = self.read().get(query_id)
        return dict(judged.qrels) if judged is not None else {}

    def record(self, query_id: str, doc_id: str, grade: int, text: str | None = None) -> None:
        """Record ``doc_id``'s ``grade`` for ``query_id``: merged into its line, or appended as
        a new line (``text`` is then the query) when the file has no such query."""
        self.record_grades(query_id, {doc_id: grade}, text)

    def record_grades(
        self,
        query_id: str,
        grades: Mapping[str, int],
        text: str | None = None,
        split: str | None = None,
    ) -> None:
        """Record the ``grades`` (document → grade) of ``query_id`` in one write: merged into
        its line, or appended as a new line — ``text`` its query, ``split`` its split (when
        not the default) — when the file has no such query; one write, so a query is never
        left half-judged in the file."""
        if not grades:
            raise ConfigError(f"query {query_id!r}: no grade to record")
        for doc_id, grade in grades.items():
            if grade not in GRADES:
                named = ", ".join(f"{g} ({name})" for g, name in GRADES.items())
                raise ConfigError(f"grade {grade!r}: expected one of {named}")
            if doc_id not in self.doc_index:
                raise DataError(f"{self.path}: document {doc_id!r} is not in the set's corpus")
        try:
            with self._lock.acquire(timeout=60):
                self._record(query_id, dict(grades), text, split)
        except Timeout:
            raise RagbenchError(
                f"{self.path}: another process has been recording judgements for a minute "
                f"(lock {self._lock.lock_file})"
            ) from None

    def _record(
        self, query_id: str, grades: dict[str, int], text: str | None, split: str | None
    ) -> None:
        judged = self.read().get(query_id)
        evidence = {e.doc_id: e.grade for e in judged.evidence} if judged is not None else {}
        for doc_id in grades:
            if doc_id in evidence:
                raise DataError(
                    f"{self.path}: query {query_id!r}: {doc_id!r} is graded {evidence[doc_id]} "
                    "by the query's evidence (edit the evidence to change it)"
                )
        if judged is not None and split is not None and judged.split != split:
            raise DataError(
                f"{self.path}: query {query_id!r} is of split {judged.split!r}, not {split!r}"
            )
        lines = self.path.read_bytes().decode("utf-8").split("\n")  # line ends kept
        number = self._line(query_id)
        if number is not None:
            line = lines[number - 1]
            bom = "\ufeff" if line.startswith("\ufeff") else ""
            end = "\r" if line.endswith("\r") else ""
            merged = _merged(json.loads(line.lstrip("\ufeff")), grades, evidence)
            lines[number - 1] = bom + json.dumps(merged, ensure_ascii=False) + end
        elif text is None:
            raise DataError(f"{self.path}: no query {query_id!r} (give its text to add it)")
        else:
            if lines[-1]:
                lines.append("")
            placed = {"split": split} if split is not None else {}
            record = {"id": query_id, "query": text, **placed, "relevant": grades}
            lines[-1:] = [json.dumps(record, ensure_ascii=False), ""]
        self._replace("\n".join(lines))

    def _line(self, query_id: str) -> int | None:
        """The number of the line that holds ``query_id`` (ids default to ``q<line>``)."""
        for number, record in jsonl_records(self.path, ProblemLog(strict=True)):
            qid = record.get("id", f"q{number}")
            if str(qid) == query_id and not isinstance(qid, bool):
                return number
        return None

    def _replace(self, content: str) -> None:
        """Write ``content`` to a temporary file next to the queries file, read it back with
        the set's reader and rename it over the queries file."""
        handle, name = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        temporary = Path(name)
        try:
            with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
                out.write(content)
            log = ProblemLog(strict=True)
            try:
                judged = read_queries(temporary, self.documents, self._folder, log)
                check_splits(judged, temporary, log)
            except DataError as exc:
                raise DataError(str(exc).replace(str(temporary), str(self.path))) from None
            os.chmod(temporary, self.path.stat().st_mode & 0o777)
            os.replace(temporary, self.path)
        finally:
            temporary.unlink(missing_ok=True)


def _merged(
    record: dict[str, Any], grades: dict[str, int], evidence: dict[str, int]
) -> dict[str, Any]:
    """``record`` with the documents of ``grades`` judged under its ``qrels`` (when it uses
    that spelling) or ``relevant`` (a list becomes an object of grade 1, without evidence
    ids)."""
    key = "qrels" if record.get("qrels") is not None else "relevant"
    current = record.get(key) or {}
    if isinstance(current, list):
        current = {d: 1 for d in current if d not in evidence}
    return {**record, key: {**current, **grades}}


# ---------------------------------------------------------------- both, and a widget


class Judge:
    """Pooled hits of the runs ``runs`` and the judgements of the labeled set ``labels`` (a
    plain folder or span-labeled set; ``queries``: a plain folder's separate queries file).
    The set is read with the split of the first run."""

    def __init__(
        self,
        labels: StrPath,
        runs: StrPath | Sequence[StrPath],
        *,
        queries: StrPath | None = None,
        k: int = 5,
        trials: Sequence[str] | None = None,
    ) -> None:
        paths = [runs] if isinstance(runs, str | os.PathLike) else list(runs)
        if not paths:
            raise ConfigError("runs: give at least one run directory")
        self.runs = [_Run(p) for p in paths]
        self.file = QueriesFile(labels, queries, self.runs[0].split)
        self.k = k
        self.trials = trials

    @property
    def query_ids(self) -> list[str]:
        """The queries of the runs, in the first run's order."""
        ids = (qid for run in self.runs for qid in run.queries.index)
        return list(dict.fromkeys(map(str, ids)))

    def pool(self, query_id: str) -> Pool:
        """The pooled hits of ``query_id``; documents without an excerpt get their beginning."""
        found = _pool(self.runs, query_id, self.k, self.trials)
        hits = tuple(
            hit
            if hit.excerpt is not None or hit.doc_id not in self.file.doc_index
            else PooledHit(hit.doc_id, hit.found, self.file.doc_index[hit.doc_id].text[:EXCERPT])
            for hit in found.hits
        )
        return Pool(found.query_id, found.text, hits, found.runs)

    def table(self, query_id: str) -> pd.DataFrame:
        """``pool(query_id).frame()`` with each document's recorded grade (NaN: unjudged)."""
        frame = self.pool(query_id).frame()
        grades = self.file.grades(query_id)
        return frame.assign(grade=frame["doc_id"].map(grades))

    def record(self, query_id: str, doc_id: str, grade: int) -> None:
        """Record a judgement (see ``QueriesFile.record``)."""
        text = next(
            (str(r.queries.at[query_id, "text"]) for r in self.runs if query_id in r.queries.index),
            None,
        )
        self.file.record(query_id, doc_id, grade, text)


class JudgingWidget:
    """A notebook view of a ``Judge``: one query at a time, its pooled hits, a button per
    grade for each hit (``buttons[doc_id][grade]``; evidence documents have none), and
    ``previous`` / ``next``. ``status`` says what the last click recorded, or why not."""

    def __init__(self, judge: Judge, query_ids: Sequence[str] | None = None) -> None:
        import ipywidgets as widgets

        self._widgets = widgets
        self.judge = judge
        self.query_ids = list(query_ids) if query_ids is not None else judge.query_ids
        if not self.query_ids:
            raise DataError("judging: no query to judge")
        self.position = 0
        self.previous = widgets.Button(description="◀ previous")
        self.next = widgets.Button(description="next ▶")
        self.heading = widgets.HTML()
        self.status = widgets.HTML()
        self.hits = widgets.VBox()
        self.buttons: dict[str, dict[int, Any]] = {}
        self.previous.on_click(lambda _: self.show(self.position - 1))
        self.next.on_click(lambda _: self.show(self.position + 1))
        navigation = widgets.HBox([self.previous, self.next])
        self.widget = widgets.VBox([navigation, self.heading, self.hits, self.status])
        self.show(0)

    @property
    def query_id(self) -> str:
        """The query shown."""
        return self.query_ids[self.position]

    def show(self, position: int) -> None:
        """Show the query at ``position`` (kept within the list)."""
        w = self._widgets
        self.position = min(max(position, 0), len(self.query_ids) - 1)
        found = self.judge.pool(self.query_id)
        grades = self.judge.file.grades(self.query_id)
        judged = self.judge.file.read().get(self.query_id)
        evidence = {e.doc_id for e in judged.evidence} if judged is not None else set()
        self.heading.value = (
            f"<b>{self.position + 1} of {len(self.query_ids)}: {html.escape(self.query_id)}"
            f"</b> — {html.escape(found.text)}"
        )
        self.previous.disabled = self.position == 0
        self.next.disabled = self.position == len(self.query_ids) - 1
        self.buttons = {}
        rows = []
        for hit in found.hits:
            found_by = html.escape(found.found_by(hit))
            about = w.HTML(
                f"<b>{html.escape(hit.doc_id)}</b> <small>found by {found_by}</small><br>"
                f"<small>{html.escape(hit.excerpt or '')}</small>"
            )
            if hit.doc_id in evidence:
                note = f"graded {grades[hit.doc_id]} by the query's evidence"
                rows.append(w.VBox([about, w.HTML(f"<i>{note}</i>")]))
                continue
            self.buttons[hit.doc_id] = {
                grade: self._button(hit.doc_id, grade, name) for grade, name in GRADES.items()
            }
            self._style(hit.doc_id, grades.get(hit.doc_id))
            rows.append(w.VBox([about, w.HBox(list(self.buttons[hit.doc_id].values()))]))
        self.hits.children = rows
        self.status.value = "" if rows else "<i>no trial retrieved anything for this query</i>"

    def _button(self, doc_id: str, grade: int, name: str) -> Any:
        button = self._widgets.Button(description=name)
        button.on_click(lambda _: self._judge(doc_id, grade))
        return button

    def _style(self, doc_id: str, chosen: int | None) -> None:
        for grade, button in self.buttons[doc_id].items():
            button.button_style = "info" if grade == chosen else ""

    def _judge(self, doc_id: str, grade: int) -> None:
        try:
            self.judge.record(self.query_id, doc_id, grade)
        except RagbenchError as exc:
            self.status.value = f"<b>not recorded</b>: {html.escape(str(exc))}"
            return
        self._style(doc_id, self.judge.file.grades(self.query_id).get(doc_id))
        self.status.value = (
            f"recorded {html.escape(self.query_id)}: {html.escape(doc_id)} = {grade} "
            f"({GRADES[grade]}) in {html.escape(str(self.judge.file.path))}"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
