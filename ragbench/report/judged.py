"""Judge a generated set's own queries by hand, and see how far its labels agree with yours.

A generated set (``ragbench datasets generate``) ranks a sweep's trials by labels nobody
checked. ``JudgingSession`` samples ``n`` of the queries the sweep's runs evaluated (seeded),
pools each one's top documents over every finished trial of the runs (``judging.Judge``) and
takes a grade per pooled document, one answer at a time: text in (``answer``), text out, so
``ragbench datasets judge`` drives it from a terminal or from piped answers.

Where the grades go: a query's grades are written in one write when its last document is
graded, into the set's own ``queries.jsonl`` (``QueriesFile.record_grades``: atomic, read back
by the set's reader) as a new line ``<id>~judged`` of split ``judged`` — the query's text, its
grades under ``relevant``. The generated split, the cuts and the corpus stay as they are, so the
judged queries are evaluated over the very documents the sweep searched, each query's sentence
cut out as before (``ragbench run CONFIG --dataset SET --set dataset.split=judged``). A split
needs one relevant grade before it is valid, so queries graded all 0 wait in the session until
one is written. A session passes over queries the file already holds under their judged id:
it resumes where the last one stopped.

``judged_agreement`` runs a run's sweep (the config its manifest records) again on the judged
split and compares the two runs (``agreement.agreement``): Kendall τ-b between the trials' means
on the judged queries and on the generated labels, with its bootstrap interval — wide for a few
dozen queries (``benchmarks/bench_judged.py`` measures how wide).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragbench.errors import ConfigError, DataError, command_line
from ragbench.experiment.config import load_config
from ragbench.experiment.runner import run as run_sweep
from ragbench.report.agreement import Agreement, agreement, agreement_config
from ragbench.report.judging import GRADES, Judge, Pool

__all__ = ["JUDGED_SPLIT", "JudgingSession", "judged_agreement", "judged_id"]

StrPath = str | os.PathLike[str]

JUDGED_SPLIT = "judged"
"""The split judged queries are written to."""
_SUFFIX = "~judged"
_EXCERPT = 300  # characters of a document shown per prompt
_PROMPT = "grade 0/1/2, s, b, q> "


def judged_id(query_id: str) -> str:
    """The id ``query_id``'s judgements get in the judged split: ``<id>~judged``."""
    return f"{query_id}{_SUFFIX}"


def _queries(n: int) -> str:
    return f"{n} query" if n == 1 else f"{n} queries"


def _eligible(judge: Judge) -> list[str]:
    """The queries of the runs' split of the set that every run evaluated (the first run's
    order); ``ConfigError`` / ``DataError`` naming ``--run`` when a run does not fit the set."""
    split = judge.runs[0].split
    if len({run.split for run in judge.runs}) > 1:
        named = ", ".join(f"{run.store.path} ({run.split!r})" for run in judge.runs)
        raise ConfigError(f"--run: the runs evaluated different splits: {named}")
    if split == JUDGED_SPLIT:
        raise ConfigError(
            f"--run {judge.runs[0].store.path}: a run of split {JUDGED_SPLIT!r}, the judgements "
            "themselves; give runs of the generated split"
        )
    file = judge.file
    texts = {q.query.id: q.query.text for q in file.read().values() if q.split == split}
    shared: list[str] | None = None
    for run in judge.runs:
        where = f"--run {run.store.path}"
        documents = int(run.store.manifest()["dataset"]["documents"])
        if documents != len(file.documents):
            raise DataError(
                f"{where}: a run of {documents:,} documents, and {file.path.parent} has "
                f"{len(file.documents):,} (a run of another dataset?)"
            )
        found = run.queries["text"]
        ids = [str(qid) for qid in found.index if str(qid) in texts]
        if not ids:
            raise DataError(
                f"{where}: none of its {len(found):,} queries is a query of split {split!r} "
                f"of {file.path} (a run of another dataset?)"
            )
        for qid in ids:
            if str(found[qid]) != texts[qid]:
                raise DataError(
                    f"{where}: query {qid!r} reads {found[qid]!r} there and {texts[qid]!r} in "
                    f"{file.path} (a run of another dataset?)"
                )
        keep = set(ids)
        shared = ids if shared is None else [q for q in shared if q in keep]
    if not shared:
        raise DataError("--run: no query of the set was evaluated by every run")
    return shared


@dataclass
class _Shown:
    """A query shown in a session: its pool, the grades given (by position) and whether the
    person skipped it."""

    pool: Pool
    grades: dict[int, int] = field(default_factory=dict)
    skipped: bool = False

    @property
    def complete(self) -> bool:
        return len(self.grades) == len(self.pool.hits)

    def first_ungraded(self) -> int:
        return next(i for i in range(len(self.pool.hits)) if i not in self.grades)

    def by_document(self) -> dict[str, int]:
        return {self.pool.hits[i].doc_id: grade for i, grade in sorted(self.grades.items())}


class JudgingSession:
    """Judging in a terminal, one answer at a time: ``start()`` gives the text to show first,
    ``answer(line)`` takes what the person typed — a grade (0, 1, 2), ``s`` (skip the query: the
    next sampled one takes its place), ``b`` (back one document, or to the previous query) or
    ``q`` (save and quit) — and gives what to show next; ``done`` once the session has ended
    (``n`` queries judged, those of earlier sessions included; the sample run out; ``q``; or
    ``quit()`` at the end of the input).

    The sample is a seeded permutation of the queries of the runs' split that every run of
    ``runs`` evaluated, taken in order, passing over those judged before; each query's pool
    holds the top ``k`` documents of every finished trial (the module docstring says where the
    grades go)."""

    def __init__(
        self,
        labels: StrPath,
        runs: StrPath | Sequence[StrPath],
        *,
        n: int = 20,
        k: int = 5,
        seed: int = 0,
    ) -> None:
        if n < 1:
            raise ConfigError(f"--queries: expected a positive number of queries, got {n}")
        if k < 1:
            raise ConfigError(f"--depth: expected a positive number of documents, got {k}")
        self.labels = labels
        self.judge = Judge(labels, runs, k=k)
        eligible = _eligible(self.judge)
        self.order = [eligible[i] for i in np.random.default_rng(seed).permutation(len(eligible))]
        self.n = n
        self.done = False
        self.written: list[str] = []  # judged ids written in this session, in order
        self._before = {
            qid.removesuffix(_SUFFIX)
            for qid, q in self.judge.file.read().items()
            if q.split == JUDGED_SPLIT and qid.endswith(_SUFFIX)
        }
        self._next = 0  # the position in ``order`` of the next query to take
        self._judged_before = len(self._before.intersection(self.order))
        self._shown: list[_Shown] = []
        self._at = (0, 0)  # (shown query, document)
        self._graded: set[str] = set()  # queries graded in this session
        self._pending: dict[str, dict[str, int]] = {}  # graded all 0, not written yet

    @property
    def judged(self) -> int:
        """How many of the runs' queries are judged: before this session or in it."""
        return self._judged_before + len(self._graded)

    def start(self) -> str:
        """What to show first: where grades go, how to answer, and the first document."""
        file = self.judge.file
        return (
            f"Judging {self.n} of the {len(self.order):,} queries of split "
            f"{self.judge.runs[0].split!r} the runs evaluated ({self._judged_before} judged "
            f"before), top {self.judge.k} documents of each trial; grades go to {file.path}, "
            f"split {JUDGED_SPLIT!r}, as <query>{_SUFFIX}.\n"
            "Answers: 0 not relevant, 1 partly, 2 relevant; s skips the query, b goes back, "
            "q saves and quits.\n" + self._take()
        )

    def answer(self, line: str) -> str:
        """What to show after the answer ``line``."""
        if self.done:
            return ""
        token = line.strip().lower()
        if token == "q":
            return self.quit()
        if token == "s":
            shown = self._shown[self._at[0]]
            shown.skipped = not shown.complete
            return f"skipped {shown.pool.query_id}\n" + self._forward()
        if token == "b":
            return self._back()
        if token in ("0", "1", "2"):
            return self._grade(int(token))
        return "expected 0, 1, 2, s, b or q\n" + _PROMPT

    def quit(self) -> str:
        """End the session: what was written and what was not."""
        self.done = True
        lines = [
            f"judged {self.judged} of {_queries(self.n)} ({len(self._graded)} in this session)"
        ]
        shown = self._shown[self._at[0]] if self._shown else None
        if shown is not None and shown.grades and not shown.complete:
            lines.append(f"{shown.pool.query_id}: not all its documents graded, not written")
        if self._pending:
            lines.append(
                f"{_queries(len(self._pending))} graded all 0 not written: split "
                f"{JUDGED_SPLIT!r} needs a relevant grade first (asked again next time)"
            )
        if self._next >= len(self.order) and self.judged < self.n:
            lines.append("the sample ran out: no other query of the runs is left to judge")
        split = f"dataset.split={JUDGED_SPLIT}"
        evaluate = command_line("ragbench run", "CONFIG", dataset=self.labels, set=split)
        runs = [run.store.path for run in self.judge.runs]
        agree = command_line("ragbench datasets judge", self.labels, run=runs, agreement=True)
        lines.append(
            f"{self.judge.file.path}: {_queries(len(self.written))} written to split "
            f"{JUDGED_SPLIT!r} in this session. Evaluate them over the same corpus: "
            f"{evaluate}; or see how far the generated labels agree: {agree}"
        )
        return "\n".join(lines) + "\n"

    def _take(self) -> str:
        """Show the next sampled query not judged yet, or end the session."""
        notes = ""
        while self.judged < self.n and self._next < len(self.order):
            qid = self.order[self._next]
            self._next += 1
            if qid in self._before:
                continue
            found = self.judge.pool(qid)
            if not found.hits:
                notes += f"{qid}: no trial retrieved anything, passed over\n"
                continue
            self._shown.append(_Shown(found))
            self._at = (len(self._shown) - 1, 0)
            return notes + self._heading() + self._prompt()
        return notes + self.quit()

    def _forward(self) -> str:
        """Go on after the current query: to the last query shown when it is still being
        graded, else to a new one."""
        last = len(self._shown) - 1
        frontier = self._shown[last]
        if self._at[0] < last and not frontier.complete and not frontier.skipped:
            self._at = (last, frontier.first_ungraded())
            return self._heading() + self._prompt()
        return self._take()

    def _back(self) -> str:
        """Back one document, or to the previous query's last one."""
        query, document = self._at
        if document > 0:
            self._at = (query, document - 1)
            return self._prompt()
        if query == 0:
            return "nothing before this document\n" + _PROMPT
        self._at = (query - 1, len(self._shown[query - 1].pool.hits) - 1)
        return self._heading() + self._prompt()

    def _grade(self, grade: int) -> str:
        """Record ``grade`` for the current document and go to the next one; after a query's
        last document, write the query."""
        query, document = self._at
        shown = self._shown[query]
        shown.grades[document] = grade
        if document + 1 < len(shown.pool.hits):
            self._at = (query, document + 1)
            return self._prompt()
        if not shown.complete:  # back in a skipped query: its first ungraded document
            self._at = (query, shown.first_ungraded())
            return self._prompt()
        shown.skipped = False
        return self._write(shown) + self._forward()

    def _write(self, shown: _Shown) -> str:
        """Write a graded query (with the all-0 queries waiting, once the split has a relevant
        grade), or keep it waiting; what happened."""
        qid, grades = shown.pool.query_id, shown.by_document()
        self._graded.add(qid)
        self._pending.pop(qid, None)
        counts = ", ".join(f"{list(grades.values()).count(g)} {name}" for g, name in GRADES.items())
        if max(grades.values()) < 1 and not self._has_relevant(judged_id(qid)):
            self._pending[qid] = grades
            return f"kept {qid} ({counts}): written once a query has a relevant document\n"
        self._record(qid, grades)
        waiting, self._pending = self._pending, {}
        for other, other_grades in waiting.items():
            self._record(other, other_grades)
        also = f" and {_queries(len(waiting))} graded all 0 before" if waiting else ""
        return f"saved {judged_id(qid)} ({counts}){also}\n"

    def _record(self, qid: str, grades: dict[str, int]) -> None:
        text = self.judge.runs[0].queries.at[qid, "text"]
        self.judge.file.record_grades(judged_id(qid), grades, str(text), JUDGED_SPLIT)
        if judged_id(qid) not in self.written:
            self.written.append(judged_id(qid))

    def _has_relevant(self, other_than: str) -> bool:
        """Whether the file's judged split has a relevant grade besides ``other_than``'s."""
        return any(
            grade >= 1
            for qid, q in self.judge.file.read().items()
            if q.split == JUDGED_SPLIT and qid != other_than
            for grade in q.qrels.values()
        )

    def _heading(self) -> str:
        pool = self._shown[self._at[0]].pool
        return f"\n[{self.judged}/{self.n} judged] {pool.query_id}: {pool.text}\n"

    def _prompt(self) -> str:
        query, document = self._at
        shown = self._shown[query]
        hit = shown.pool.hits[document]
        given = f" (given: {shown.grades[document]})" if document in shown.grades else ""
        excerpt = " ".join((hit.excerpt or "").split())
        if len(excerpt) > _EXCERPT:
            excerpt = excerpt[:_EXCERPT] + "…"
        return (
            f"  {document + 1}/{len(shown.pool.hits)} {hit.doc_id}{given} — found by "
            f"{shown.pool.found_by(hit)}\n    {excerpt}\n{_PROMPT}"
        )


def judged_agreement(
    labels: StrPath,
    run: StrPath,
    *,
    out: StrPath | None = None,
    metric: str | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    progress: bool = True,
) -> Agreement:
    """How alike the judged queries of ``labels`` and the generated labels the run ``run``
    evaluated rank its trials on ``metric`` (default: the run's first). The run's sweep (the
    config its manifest records, no honest selection) runs again on split ``judged`` of
    ``labels`` into ``out`` (default: ``<run>-judged`` next to it; started afresh, since the
    judged queries change between sessions, its indexes loaded from the run's stage cache);
    in the result the judged run is ``real``, ``run`` is ``synthetic``."""
    judge = Judge(labels, run)
    _eligible(judge)
    if not any(q.split == JUDGED_SPLIT for q in judge.file.read().values()):
        raise DataError(
            f"{judge.file.path}: no judged queries yet (split {JUDGED_SPLIT!r}): judge some "
            "first (ragbench datasets judge)"
        )
    store = judge.runs[0].store
    manifest = store.manifest()
    config = agreement_config(load_config(manifest["config"]), os.fspath(labels))
    dataset = config.dataset.model_copy(update={"split": JUDGED_SPLIT})
    target = Path(out) if out is not None else store.path.with_name(f"{store.path.name}-judged")
    run_sweep(
        config.model_copy(update={"dataset": dataset}),
        target,
        overwrite=True,
        cache_root=manifest["cache_root"],
        progress=progress,
    )
    return agreement(target, store.path, metric, n_resamples=n_resamples, seed=seed)
