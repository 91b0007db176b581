"""The run directory: the contract between the runner, reports, notebooks and users.

```
<out>/manifest.json        resolved config, dataset fingerprint, versions, git commit, timing
<out>/trials.parquet       one row per finished trial (params, mean metrics, latency, status)
<out>/per_query.parquet    trial_id, query_id, metric, value
<out>/curves.parquet       trial_id, metric (family), k, value: mean metric@k for k = 1..depth
<out>/queries.parquet      query_id, text, judged documents and evidence (for drill-downs)
<out>/answers.parquet      trial_id, query_id, answer, chunk ids, seconds, tokens, cost
                           (trials with a generator)
<out>/runs/<trial>.trec    the trial's ranking at the evaluated level (trec_eval format)
<out>/runs/<trial>.top.parquet   top chunks per query with text excerpts
<out>/runs/<trial>.traces.json   per stage and query, what a loop did (agentic retrievers)
<out>/selection.json, selection_per_query.parquet   honest selection (when configured)
```
A trial is committed by atomic writes — run files, then ``per_query.parquet`` and
``curves.parquet``, then ``trials.parquet`` — and counts as finished only once its row is in
``trials.parquet``; rows of the other tables whose trial never got that far are dropped on the
next commit. A failed write (a full disk) removes its temporary file and raises a one-line
error naming the folder, so the tables keep their last good version. One process at a time
writes a run directory (``hold``), and ``repair`` checks finished trials against this contract
before a resume, dropping those that lost a file so that they run again. Every file is checked
where ``RunStore`` reads it — a table for its columns and their types, a JSON file for its
keys (``read_json``), the tables against each other (each trial listed once, every per-query
value of each finished trial, the queries the run evaluated) — so one damaged, truncated or
written by another tool is one ``DataError`` naming it and what was expected. A table is read
through one open handle, so a reader of a run still being written (``running``) never sees
half a file. ``dataset`` is the labeled set the run scored, refused once it changed.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock, Timeout

from ragbench.data import load_dataset
from ragbench.data.labeled import LabeledSet
from ragbench.data.sample import Sampled, sample_set
from ragbench.data.trec import write_ranking
from ragbench.errors import ConfigError, DataError, RagbenchError
from ragbench.owned import MARKER, claim
from ragbench.retrieve.timed import percentiles_ms
from ragbench.types import Ranking

__all__ = ["RUN_TABLES", "RunStore", "TrialResult", "read_json", "write_failure"]

RUN_TABLES = ("trials.parquet", "per_query.parquet", "curves.parquet", "answers.parquet")


@dataclass
class TrialResult:
    """Everything a finished (or failed) trial hands to the run directory."""

    trial_id: str
    label: str
    params: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    error: str = ""
    per_query: dict[str, np.ndarray] = field(default_factory=dict)
    latency: dict[str, np.ndarray] = field(default_factory=dict)
    index_build_s: float = 0.0
    peak_rss_mb: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    seconds: float = 0.0
    ranking: Ranking | None = None
    top: pd.DataFrame | None = None
    curves: dict[str, np.ndarray] = field(default_factory=dict)
    answers: pd.DataFrame | None = None
    usage: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    llm_requests: int = 0
    counters: dict[str, np.ndarray] = field(default_factory=dict)
    traces: dict[str, list[Any]] = field(default_factory=dict)
    latency_info: dict[str, Any] = field(default_factory=dict)

    def row(self, query_ids: Sequence[str]) -> dict[str, Any]:
        """The trials.parquet row: params, mean metrics, latency p50/p95 (ms/query), costs."""
        row: dict[str, Any] = {
            "trial_id": self.trial_id,
            "label": self.label,
            "status": self.status,
            "error": self.error,
            "config": json.dumps(self.config, sort_keys=True),
            **{f"param.{k}": v for k, v in self.params.items()},
        }
        for metric, values in self.per_query.items():
            # mean over the queries the metric could score (an answer metric may skip some)
            scored = np.asarray(values, dtype=np.float64)
            scored = scored[~np.isnan(scored)]
            row[metric] = float(scored.mean()) if len(scored) else float("nan")
        sampled = len(next(iter(self.latency.values()))) if self.latency else 0
        total = np.zeros(sampled)
        for stage, seconds in self.latency.items():
            total = total + seconds
            row[f"latency.{stage}.p50_ms"], row[f"latency.{stage}.p95_ms"] = percentiles_ms(seconds)
        if self.latency:
            row["latency.total.p50_ms"], row["latency.total.p95_ms"] = percentiles_ms(total)
        info = dict(self.latency_info)
        if "cpu_ms" in info:
            cpu = np.asarray(info.pop("cpu_ms"))
            row["latency.cpu.p50_ms"], row["latency.cpu.p95_ms"] = percentiles_ms(cpu / 1000.0)
        row |= {f"latency.{name}": value for name, value in info.items()}
        cost = np.zeros(len(query_ids))
        for stage, spent in self.usage.items():
            row[f"tokens.{stage}.prompt"] = float(np.mean(spent["prompt_tokens"]))
            row[f"tokens.{stage}.completion"] = float(np.mean(spent["completion_tokens"]))
            row[f"cost.{stage}"] = float(np.mean(spent["cost"]))
            cost = cost + spent["cost"]
        if self.usage:
            row["cost.total"] = float(np.mean(cost))  # US dollars per query; NaN without prices
        for name, values in self.counters.items():
            row[name] = float(np.mean(values))  # e.g. agentic.rounds: mean per query
        row |= {
            "llm_requests": self.llm_requests,
            "index_build_s": self.index_build_s,
            "peak_rss_mb": self.peak_rss_mb,
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
            "seconds": self.seconds,
            "queries": len(query_ids),
        }
        return row


def _answers(result: TrialResult) -> pd.DataFrame:
    """The answers.parquet rows of a trial, with its generator's tokens and cost per query."""
    frame = result.answers.copy() if result.answers is not None else pd.DataFrame()
    frame.insert(0, "trial_id", result.trial_id)
    spent = result.usage.get("generate")
    if spent is not None:
        frame["prompt_tokens"] = spent["prompt_tokens"]
        frame["completion_tokens"] = spent["completion_tokens"]
        frame["cost"] = spent["cost"]
    return frame


def _uniform(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns mixing value types (a param that is 512 in one trial, "auto" in another)
    become strings, so parquet can store them."""
    out = frame.copy()
    for column in [c for c in out.columns if pd.api.types.is_object_dtype(out[c])]:
        kinds = {type(v) for v in out[column] if v is not None and v == v}
        if len(kinds) > 1:
            out[column] = out[column].map(lambda v: v if v is None else str(v))
    return out


def write_failure(folder: Path, what: str, exc: OSError) -> RagbenchError:
    """The one-line error for a write into ``folder`` that failed (a full disk says so)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return RagbenchError(f"{folder}: no space left on device ({what})")
    return RagbenchError(f"{folder}: cannot write ({what}): {exc.strerror or exc}")


def _atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Write ``path`` by ``write``-ing a temporary file renamed over it, so a reader never sees
    a partial file; when that fails the temporary file goes and the old ``path`` stays."""
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex}-{path.name}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        what = f"writing {path.name}; finished trials are kept: free space, then --resume"
        raise write_failure(path.parent, what, exc) from None


def _atomic_parquet(frame: pd.DataFrame, path: Path) -> None:
    _atomic(path, lambda tmp: _uniform(frame).to_parquet(tmp, index=False))


def _atomic_text(text: str, path: Path) -> None:
    _atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


# What a run directory's files hold (shapes of ``read_json``), checked where they are read: a
# file another tool wrote, a damaged or truncated one, is one ``DataError`` naming it and what
# was expected.
_NULL = type(None)
_SHARED = {"shared": int, "of": int}
_MANIFEST: dict[str, Any] = {
    "config": {
        "name": str,
        "dataset": {"format?": (str, _NULL)},
        "evaluation": {"metrics": [str], "report_on?": (str, _NULL)},
        "baseline?": (str, _NULL),
        "search?": {"strategy?": str, "n?": (int, _NULL)},
    },
    "dataset": {
        "path": str,
        "split": str,
        "name": str,
        "documents": int,
        "queries?": (str, _NULL),
        "sample?": {"documents": int, "of": int, "seed": int, "source?": str},
    },
    "dataset_fingerprint": str,
    "queries": {"count": int, "of?": int, "left_out?": {"*": int}},
    "evaluation": {"level": str, "relevance_level": int, "context_k?": int},
    "metrics?": [str],
    "skipped_metrics?": {"*": str},
    "trials?": {"*": str},
    "planned?": (int, _NULL),
    "evidence?": {
        "trained_on?": [{"where": str, "model": (str, _NULL), "split": str, **_SHARED}],
        "shared_queries?": {"select_on": str, "report_on": str, **_SHARED},
    },
    "cache_root": str,
    "versions?": {"*": str},
    "git_commit?": (str, _NULL),
    "started?": str,
    "finished?": str,
    "seconds?": float,
}
_SELECTION: dict[str, dict[str, Any]] = {
    "splits": {
        "select_on": str,
        "report_on": str,
        "chosen": {"*": {"trial_id": str, "label": str, "selected": float, "reported": float}},
    },
    "folds": {
        "folds": int,
        "split": str,
        "chosen": {"*": {"per_fold": [str], "cross_validated": float, "best_in_sample": float}},
    },
}
# the columns of each table (``name?``: optional), by the type of their values (``dict`` and
# ``list``: text holding a JSON object or list)
_LONG = {"trial_id": str, "query_id": str, "metric": str, "value": float}
_COLUMNS: dict[str, dict[str, type]] = {
    "trials": {"trial_id": str, "label": str, "status": str, "config?": dict},
    "per_query": _LONG,
    "selection_per_query": _LONG,
    "curves": {"trial_id": str, "metric": str, "k": int, "value": float},
    "answers": {"trial_id": str, "query_id": str, "answer": str, "chunk_ids": list},
    "queries": {"query_id": str, "text": str, "qrels": dict, "evidence": list, "reference?": str},
    "top": {
        "query_id": str,
        "rank": int,
        "chunk_id": str,
        "doc_id": str,
        "score": float,
        "text": str,
    },
}
_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    dict: "a JSON object",
    list: "a list",
    _NULL: "null",
}


def _what(shape: Any) -> str:
    """What a shape expects, in words."""
    if isinstance(shape, dict):
        return "a JSON object"
    if isinstance(shape, list):
        return f"a list of {_plural(shape[0])}"
    return " or ".join(_NAMES[t] for t in (shape if isinstance(shape, tuple) else (shape,)))


def _plural(kind: type) -> str:
    """``strings`` for ``str``: what a list or a column of ``kind`` holds."""
    return _NAMES[kind].split(" ", 1)[1] + "s"


def _found(value: Any) -> str:
    """What a JSON value is, in words."""
    if isinstance(value, bool):
        return _NAMES[bool]
    return next((_NAMES[t] for t in _NAMES if isinstance(value, t)), type(value).__name__)


def _is(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, int) and float in types:
        return True
    return isinstance(value, types)


def _check(file: Path, value: Any, shape: Any, key: str = "") -> None:
    """``DataError`` naming ``file`` and the key unless ``value`` has ``shape``."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise _wrong(file, key, shape, value)
        for name, inner in shape.items():
            if name == "*":
                for item, found in value.items():
                    _check(file, found, inner, f"{key}.{item}" if key else item)
                continue
            name, optional = name.removesuffix("?"), name.endswith("?")
            where = f"{key}.{name}" if key else name
            if name in value:
                _check(file, value[name], inner, where)
            elif not optional:
                raise DataError(
                    f"{file}: no {where!r} (expected {_what(inner)}); it was not written by "
                    "ragbench, or was changed since"
                )
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise _wrong(file, key, shape, value)
        for number, item in enumerate(value):
            _check(file, item, shape[0], f"{key}[{number}]")
    elif not _is(value, shape if isinstance(shape, tuple) else (shape,)):
        raise _wrong(file, key, shape, value)


def _wrong(file: Path, key: str, shape: Any, value: Any) -> DataError:
    where = f"{key!r}" if key else "the file"
    return DataError(f"{file}: {where} is {_found(value)}, expected {_what(shape)}")


def read_json(path: Path, shape: Any, what: str) -> Any:
    """A JSON file ragbench wrote (a ``what``: a manifest, a selection, a collection's
    documents), checked to have ``shape``; ``DataError`` naming the file and the key when it is
    unreadable or holds something else. A shape is a type (``float``: any number), a tuple of
    types, ``[shape]`` (a list of it) or ``{key: shape}`` (an object; ``key?``: optional,
    ``*``: every key)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a readable {what} ({exc})") from None
    _check(path, value, shape)
    return value


def _column_problem(column: pd.Series, kind: type) -> str | None:
    """What is wrong with the values of ``column`` for ``kind`` (strings may be null), or
    None."""
    if kind in (dict, list):
        for row, text in enumerate(column):
            try:
                value = json.loads(text) if isinstance(text, str) else text
            except json.JSONDecodeError:
                value = text
            if not isinstance(value, kind):
                shown = repr(text) if len(repr(text)) <= 40 else repr(text)[:37] + "..."
                return f"row {row + 1} holds {shown}, expected text holding {_NAMES[kind]}"
        return None
    if kind is str:
        ok = pd.api.types.is_string_dtype(column) or all(
            isinstance(v, str) for v in column.dropna()
        )
    elif kind is int:
        ok = pd.api.types.is_integer_dtype(column)
    else:
        ok = pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)
    return None if ok else f"holds {column.dtype} values, expected {_plural(kind)}"


def _read_parquet(path: Path, table: str) -> pd.DataFrame:
    """A table of the run directory with the columns of ``table`` (``_COLUMNS``); ``DataError``
    naming it when it cannot be read or lacks one. The file is read through one open handle:
    a reader given the path looks up its size and opens it apart, so a run replacing the file
    between the two would hand it the size of one version and the bytes of the next."""
    try:
        with path.open("rb") as handle:
            frame = pd.read_parquet(handle)
    except (OSError, ValueError, pa.ArrowException) as exc:  # ArrowInvalid is a ValueError
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = re.sub(r"^Could not open Parquet input source '[^']*': ", "", reason)
        raise DataError(f"{path}: not a readable parquet table ({reason})") from None
    expected = _COLUMNS[table]
    if not frame.columns.size:  # a table written with no rows nor columns (no trial had any)
        return pd.DataFrame(columns=[c for c in expected if not c.endswith("?")])
    for name, kind in expected.items():
        column = name.removesuffix("?")
        if column not in frame.columns:
            if name.endswith("?"):
                continue
            found = ", ".join(map(str, frame.columns[:6])) + (", ..." if frame.shape[1] > 6 else "")
            holds = ", ".join(c.removesuffix("?") for c in expected)
            raise DataError(
                f"{path}: no column {column!r} (a ragbench {table} table holds {holds}); "
                f"found {found or 'no columns'}"
            )
        problem = _column_problem(frame[column], kind)
        if problem is not None:
            raise DataError(f"{path}: column {column!r} {problem}")
    return frame


_CHANGED = "it was changed since the run, by hand or by another tool"
_READS = 3  # reads of trials.parquet and per_query.parquet before a mismatch is damage


def _identity(path: Path) -> tuple[int, int, int] | None:
    """Which version of ``path`` is there now (inode, size, modification time; an atomic
    write makes a new inode), or None when it is missing."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _started_run(path: Path) -> bool:
    """Whether ``path`` holds a run an older ragbench started (before run directories were
    marked): a manifest with the run's config and dataset fingerprint."""
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(manifest, dict) and {"config", "dataset_fingerprint"} <= set(manifest)


class RunStore:
    """Reads and writes one run directory."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    @property
    def manifest_path(self) -> Path:
        """``manifest.json``."""
        return self.path / "manifest.json"

    def exists(self) -> bool:
        """Whether a run was started here."""
        return self.manifest_path.is_file()

    def manifest(self) -> dict[str, Any]:
        """The manifest (error naming the folder when it is not a run directory, or the file
        when it cannot be read)."""
        if not self.exists():
            raise DataError(f"{self.path}: not a ragbench run directory (no manifest.json)")
        manifest: dict[str, Any] = read_json(self.manifest_path, _MANIFEST, "manifest")
        sample = manifest["dataset"].get("sample")
        if sample is not None:  # every field checked, ranges too (ragbench.data.sample)
            Sampled.from_dict(sample, f"{self.manifest_path}: dataset.sample")
        return manifest

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the run directory for this process while it writes (an inter-process lock,
        released on exit or when the process dies); ``ConfigError`` at once when another
        process holds it. A run directory it made that is still empty when an error ends the
        hold is removed: refused input leaves nothing behind."""
        made = not self.path.exists()
        claim(self.path, "--out", "run directory", earlier=_started_run)
        lock = FileLock(self.path / ".lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise ConfigError(
                f"{self.path}: another ragbench run holds this run directory; wait for it to "
                "finish or pass another --out"
            ) from None
        except OSError as exc:  # a folder in its place, or no permission
            raise DataError(
                f"{self.path / '.lock'}: cannot lock the run directory with it "
                f"({exc.strerror or exc}); remove it if no run is writing here"
            ) from None
        try:
            yield
        except BaseException:
            lock.release()
            if made and {p.name for p in self.path.iterdir()} <= {".lock", MARKER}:
                shutil.rmtree(self.path, ignore_errors=True)
            raise
        lock.release()

    def running(self) -> bool:
        """Whether a run holds this run directory now (``hold``, in any process): its files
        are still being written, so what is missing may yet come. Probed without waiting, and
        the lock file stays as it is."""
        path = self.path / ".lock"
        if not path.is_file():
            return False
        probe = FileLock(path)
        try:
            probe.acquire(timeout=0)
        except Timeout:
            return True
        except OSError:  # a lock file this process cannot open: it cannot tell, and reads on
            return False
        probe.release()
        return False

    def dataset(self, whole: bool = False) -> LabeledSet:
        """The run's labeled set as the run scored it: the sample of it the run's config
        drew, when it drew one, else (and with ``whole``) every document. ``DataError``
        naming the manifest when the set changed since the run (the fingerprint of what it
        scored differs): the trials were scored on other documents or labels than those a
        deployed or exported trial would read."""
        manifest = self.manifest()
        dataset, config = manifest["dataset"], manifest["config"]["dataset"]
        labeled = load_dataset(
            dataset["path"],
            format=config.get("format"),
            split=dataset["split"],
            queries=dataset.get("queries"),
        )
        scored = labeled
        if config.get("sample") is not None:
            scored, _ = sample_set(labeled, config["sample"], int(config.get("sample_seed", 0)))
        if scored.fingerprint != manifest["dataset_fingerprint"]:
            raise DataError(
                f"{self.manifest_path}: the dataset at {dataset['path']} changed since the run "
                "(its fingerprint differs), so the run's scores are not those of its trials "
                "over it now; run the sweep again"
            )
        return labeled if whole else scored

    def metrics(self) -> list[str]:
        """The metrics the run evaluated, in config order (those it had to skip left out)."""
        manifest = self.manifest()
        return list(manifest.get("metrics") or manifest["config"]["evaluation"]["metrics"])

    def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Write ``manifest.json`` atomically."""
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "runs").mkdir(exist_ok=True)
        _atomic_text(json.dumps(manifest, indent=2, default=str) + "\n", self.manifest_path)

    def write_queries(self, frame: pd.DataFrame) -> None:
        """``queries.parquet``: the evaluated queries with their judgements and evidence."""
        _atomic_parquet(frame, self.path / "queries.parquet")

    def write_selection(self, summary: Mapping[str, Any], per_query: pd.DataFrame) -> None:
        """``selection.json`` and ``selection_per_query.parquet`` (see experiment.selection)."""
        _atomic_parquet(per_query, self.path / "selection_per_query.parquet")
        _atomic_text(json.dumps(summary, indent=2) + "\n", self.path / "selection.json")

    def selection(self) -> tuple[dict[str, Any], pd.DataFrame] | None:
        """The selection summary and its per-query values, when the run made one."""
        path = self.path / "selection.json"
        if not path.is_file():
            return None
        mode = read_json(path, {"mode": str}, "selection")["mode"]
        if mode not in _SELECTION:
            raise DataError(f"{path}: 'mode' is {mode!r}, expected one of {', '.join(_SELECTION)}")
        common = {"baseline": (str, _NULL), "report_queries": int}
        summary: dict[str, Any] = read_json(path, {**common, **_SELECTION[mode]}, "selection")
        return summary, self._required("selection_per_query")

    def trials(self) -> pd.DataFrame:
        """Finished trials (empty frame when none), with a column per metric the run
        evaluated."""
        path = self.path / "trials.parquet"
        if not path.is_file():
            return pd.DataFrame()
        trials = _read_parquet(path, "trials")
        twice = trials["trial_id"][trials["trial_id"].duplicated()]
        if len(twice):
            rows = np.flatnonzero(trials["trial_id"] == twice.iloc[0]) + 1
            raise DataError(
                f"{path}: a trial listed {len(rows)} times ({twice.iloc[0]!r}, rows "
                f"{', '.join(map(str, rows))}), and a run lists each trial once; {_CHANGED}"
            )
        if self.exists() and (trials["status"] == "ok").any():  # finished trials' means
            for metric in self.metrics():
                found = trials.get(metric)
                problem = "is missing" if found is None else _column_problem(found, float)
                if problem is not None:
                    raise DataError(f"{path}: column {metric!r} (an evaluated metric) {problem}")
        return trials

    def queries(self) -> pd.DataFrame:
        """The evaluated queries: query_id, text, qrels and evidence (JSON), reference answer
        and how the label was made (``method``) where known; ``DataError`` naming the file
        when it lists a query twice or another number of queries than the run evaluated."""
        path = self.path / "queries.parquet"
        queries = self._required("queries")
        twice = queries["query_id"][queries["query_id"].duplicated()]
        if len(twice):
            raise DataError(f"{path}: a query listed twice ({twice.iloc[0]!r}); {_CHANGED}")
        count = int(self.manifest()["queries"]["count"])
        if len(queries) != count:
            gap = count - len(queries)
            which = f"{gap} missing" if gap > 0 else f"{-gap} more than it evaluated"
            raise DataError(
                f"{path}: {len(queries)} queries, and the run evaluated {count} (its "
                f"{self.manifest_path.name}): {which}; {_CHANGED}"
            )
        return queries

    def top(self, trial_id: str) -> pd.DataFrame:
        """A trial's top chunks per query (``runs/<trial>.top.parquet``): query_id, rank,
        chunk_id, doc_id, start, end, score and an excerpt (``text``)."""
        return self._required("top", f"runs/{trial_id}.top.parquet")

    def per_query(self) -> pd.DataFrame:
        """Per-query values of finished trials: each has one value of each metric the run
        evaluated for each query of ``queries.parquet``; ``DataError`` naming the file when a
        finished trial lacks some, has one twice or has one of a query the run did not
        evaluate. ``trials.parquet`` is read first: a running sweep writes a trial's values
        before its row, so every trial read has its values, unless the row was dropped since
        (a resume's ``repair``): then both are read again."""
        path, reads = self.path / "trials.parquet", 0
        while True:
            seen = _identity(path)
            trials = self.trials()
            values = self._table("per_query", ["trial_id", "query_id", "metric", "value"])
            if trials.empty:
                return values.iloc[:0]
            finished = trials[trials["status"] == "ok"]
            problem = self._values_problem(finished, values)
            if problem is None:
                return values[values["trial_id"].isin(finished["trial_id"])].reset_index(drop=True)
            reads += 1
            if reads == _READS or _identity(path) == seen:
                raise DataError(problem)

    def _values_problem(self, finished: pd.DataFrame, values: pd.DataFrame) -> str | None:
        """What is wrong with the per-query ``values`` of the ``finished`` trials (rows of
        ``trials.parquet``), or None."""
        if finished.empty:
            return None
        file = self.path / "per_query.parquet"
        metrics, ids = self.metrics(), self.queries()["query_id"]
        ours = values["trial_id"].isin(finished["trial_id"]) & values["metric"].isin(metrics)
        rows = values[ours]
        twice = rows.duplicated(["trial_id", "metric", "query_id"])
        if twice.any():
            row = rows[twice].iloc[0]
            return (
                f"{file}: a value listed twice ({row['metric']} of query {row['query_id']!r} "
                f"for trial {row['trial_id']!r}); {_CHANGED}"
            )
        known = rows["query_id"].isin(set(ids))
        if not known.all():
            row = rows[~known].iloc[0]
            return (
                f"{file}: a value of a query the run did not evaluate ({row['query_id']!r}, "
                f"which queries.parquet does not list, for trial {row['trial_id']!r}); {_CHANGED}"
            )
        expected = len(ids) * len(metrics)
        counts = rows.groupby("trial_id").size()
        short = [t for t in finished["trial_id"] if counts.get(t, 0) < expected]
        if not short:
            return None
        trial = short[0]
        label = finished.loc[finished["trial_id"] == trial, "label"].iloc[0]
        mine = rows[rows["trial_id"] == trial]
        have = set(zip(mine["metric"], mine["query_id"], strict=True))
        metric, query = next((m, q) for m in metrics for q in ids if (m, q) not in have)
        others = f" (and {len(short) - 1} other trial(s))" if len(short) > 1 else ""
        return (
            f"{file}: {expected - len(mine)} of the {expected} per-query values of trial "
            f"{trial!r} ({label}) are missing, e.g. {metric} of query {query!r}{others}; "
            f"{_CHANGED} (`ragbench run --resume` runs such trials again)"
        )

    def answers(self) -> pd.DataFrame:
        """Answers of finished trials with a generator: trial_id, query_id, answer, chunk ids
        (JSON), seconds, and tokens and cost per query where the generator spent any."""
        return self._table("answers", ["trial_id", "query_id", "answer", "chunk_ids", "seconds"])

    def curves(self) -> pd.DataFrame:
        """Mean metric@k curves of finished trials."""
        return self._table("curves", ["trial_id", "metric", "k", "value"])

    def _table(self, name: str, columns: list[str]) -> pd.DataFrame:
        path = self.path / f"{name}.parquet"
        frame = _read_parquet(path, name) if path.is_file() else pd.DataFrame()
        return frame if frame.columns.size else pd.DataFrame(columns=columns)

    def _required(self, table: str, name: str | None = None) -> pd.DataFrame:
        """A table every run directory holds (``name``, default ``<table>.parquet``)."""
        path = self.path / (name or f"{table}.parquet")
        if not path.is_file():
            raise DataError(f"{path}: missing; the run directory is incomplete")
        return _read_parquet(path, table)

    def _append(self, name: str, keep: set[str], frames: list[pd.DataFrame]) -> None:
        """Rewrite ``<name>.parquet`` with the rows of ``keep`` trials plus ``frames``."""
        old = self._table(name, [])
        if not old.empty:
            old = old[old["trial_id"].isin(keep)]
        _atomic_parquet(pd.concat([old, *frames], ignore_index=True), self.path / f"{name}.parquet")

    def finished_ids(self) -> set[str]:
        """Ids of trials that finished successfully."""
        trials = self.trials()
        if trials.empty:
            return set()
        return set(trials.loc[trials["status"] == "ok", "trial_id"])

    def commit(self, result: TrialResult, query_ids: Sequence[str]) -> None:
        """Add (or replace) one trial: run files, per-query values, then its trials row."""
        runs = self.path / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        if result.ranking is not None:
            ranking = result.ranking
            _atomic(
                runs / f"{result.trial_id}.trec",
                lambda tmp: write_ranking(tmp, ranking, list(query_ids), tag=result.trial_id),
            )
        if result.top is not None:
            _atomic_parquet(result.top, runs / f"{result.trial_id}.top.parquet")
        if result.traces:
            traces = {
                stage: dict(zip(query_ids, per_query, strict=True))
                for stage, per_query in result.traces.items()
            }
            _atomic_text(
                json.dumps(traces, ensure_ascii=False), runs / f"{result.trial_id}.traces.json"
            )
        trials = self.trials()
        keep = set(trials["trial_id"]) - {result.trial_id} if not trials.empty else set()
        per_query = [
            pd.DataFrame(
                {
                    "trial_id": result.trial_id,
                    "query_id": list(query_ids),
                    "metric": metric,
                    "value": np.asarray(values, dtype=np.float64),
                }
            )
            for metric, values in result.per_query.items()
        ]
        self._append("per_query", keep, per_query)
        curves = [
            pd.DataFrame(
                {
                    "trial_id": result.trial_id,
                    "metric": family,
                    "k": np.arange(1, len(values) + 1),
                    "value": values,
                }
            )
            for family, values in result.curves.items()
        ]
        self._append("curves", keep, curves)
        if result.answers is not None or (self.path / "answers.parquet").exists():
            self._append("answers", keep, [] if result.answers is None else [_answers(result)])
        if not trials.empty:
            trials = trials[trials["trial_id"] != result.trial_id]
        row = pd.DataFrame([result.row(query_ids)])
        _atomic_parquet(pd.concat([trials, row], ignore_index=True), self.path / "trials.parquet")

    def repair(
        self, query_ids: Sequence[str], metrics: Sequence[str], curves: Collection[str]
    ) -> list[str]:
        """Check every finished trial against the contract — its per-query value of each of
        ``metrics`` for each of ``query_ids``, a curve of each family in ``curves``,
        ``runs/<id>.trec`` and a readable ``runs/<id>.top.parquet`` — and drop the rows of
        those that lack any, so that a resume runs them again; returns what was dropped and
        why. An unreadable table is removed: every trial then runs again."""
        try:
            trials, curve_rows = self.trials(), self.curves()
            per_query = self._table("per_query", ["trial_id", "query_id", "metric", "value"])
        except DataError as exc:
            for name in RUN_TABLES:
                (self.path / name).unlink(missing_ok=True)
            return [f"{exc}; every trial runs again"]
        ok = trials[trials["status"] == "ok"] if not trials.empty else trials
        if ok.empty:
            return []
        values = per_query.groupby("trial_id")
        families = curve_rows.groupby("trial_id")["metric"].agg(set)
        expected = {(m, q) for m in metrics for q in query_ids}
        dropped = []
        for trial in ok.itertuples(index=False):
            have = set()
            if trial.trial_id in values.groups:
                rows = values.get_group(trial.trial_id)
                have = set(zip(rows["metric"], rows["query_id"], strict=True))
            lacks = []
            missing = sorted(expected - have)
            if missing:
                metric, query = missing[0]
                lacks.append(f"{len(missing)} per-query value(s), e.g. {metric} of {query!r}")
            curved = families.get(trial.trial_id, set())
            lacks += [f"the {family} curve" for family in sorted(set(curves) - curved)]
            lacks += self._lost_run_files(str(trial.trial_id))
            if lacks:
                why = f"trial {trial.trial_id} ({trial.label}) lacks {', '.join(lacks)}"
                dropped.append((trial.trial_id, f"{why}: it runs again"))
        if dropped:
            gone = {trial_id for trial_id, _ in dropped}
            _atomic_parquet(trials[~trials["trial_id"].isin(gone)], self.path / "trials.parquet")
            keep = set(trials["trial_id"]) - gone
            self._append("per_query", keep, [])
            self._append("curves", keep, [])
        return [why for _, why in dropped]

    def _lost_run_files(self, trial_id: str) -> list[str]:
        """The run files of a finished trial that are missing or unreadable."""
        lost = []
        if not (self.path / "runs" / f"{trial_id}.trec").is_file():
            lost.append(f"runs/{trial_id}.trec")
        try:
            pq.read_metadata(self.path / "runs" / f"{trial_id}.top.parquet")
        except (OSError, ValueError):
            lost.append(f"a readable runs/{trial_id}.top.parquet")
        return lost
