"""A warm search process: `ragbench serve` on the demo collection, queried over HTTP, against
the server it replaced.

``ragbench search`` loads torch and the model for every call; ``ragbench serve`` loads them once.
This benchmark ingests the bundled demo set (``datasets/demo``) into a collection with the
pipeline defaults (recursive 800/100 chunks, hybrid BM25 + dense over hnsw, MiniLM) and starts
two servers on it, each in its own process, one after the other: this checkout's (FastAPI on
uvicorn) and the one at commit ``OLD_COMMIT`` (the standard library's ``http.server``), exported
with ``git archive`` into a temporary folder and run from there (``PYTHONPATH``). Each gets

* ``queries`` of the demo set's queries one after another over one connection: the wall time
  per request as the client sees it, p50 and p95 ms (target p50 < 100 ms), and the first
  request's;
* ``requests`` requests in waves of ``concurrency`` sent at the same moment from as many
  threads, each on a new connection (bursts of clients): the requests that got no 200 (a reset,
  a refused connection, a timeout, an error status), p50 and p95 ms of those answered, and
  requests answered per second (target: no error for this checkout's server); and the
  tracebacks its log holds afterwards.

The collection is kept under the stage cache root (``RAGBENCH_CACHE``), keyed by the corpus and
the pipeline, so MiniLM embeds the corpus once; ``--tiny`` uses the hashing embedder instead (no
model, seconds to ingest).

``python -m benchmarks.bench_serve [--queries N] [--requests N] [--concurrency N] [--tiny]``;
``measure()`` returns the figures as a dict.

``SERVE`` draws its RESULTS.md section.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.render import Figures, Lines, met, num, part, table

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "datasets" / "demo"
MINILM = {"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2"}
HASHING = {"kind": "hashing"}
OLD_COMMIT = "37117fc"  # the last commit whose server is the standard library's http.server
NEW = "FastAPI on uvicorn (this checkout)"
OLD = f"`http.server` (commit {OLD_COMMIT})"


_INGEST = """
import json, sys
from pathlib import Path
from ragbench.pipeline import RAGPipeline
from ragbench.text.loaders import load
embedder, corpus, target = json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
pipeline = RAGPipeline.from_config({"embedder": embedder})
pipeline.index(load(corpus))
pipeline.save(target)
"""


def collection(embedder: dict[str, Any], package: Path | None = None) -> tuple[Path, str, float]:
    """The demo collection with ``embedder`` (its db folder and name), ingested on first use
    into the stage cache root by the package under ``package`` (in its own collection format)
    or this checkout's, and the seconds ingesting took (0 when it was there)."""
    from ragbench.index.cache import default_cache_root

    corpus = DEMO / "corpus"
    digest = hashlib.sha256(json.dumps(embedder, sort_keys=True).encode())
    for path in sorted(corpus.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(corpus)).encode() + path.read_bytes())
    db = default_cache_root() / "bench_serve"
    name = f"demo-{digest.hexdigest()[:16]}" + ("-old" if package else "")
    if (db / name / "pipeline.json").is_file():
        return db, name, 0.0
    started = time.perf_counter()
    env = {**os.environ, **({"PYTHONPATH": str(package)} if package else {})}
    command = [sys.executable, "-c", _INGEST, json.dumps(embedder), str(corpus), str(db / name)]
    subprocess.run(command, env=env, cwd=package or REPO, check=True, capture_output=True)
    return db, name, time.perf_counter() - started


def _queries(n: int) -> list[str]:
    """``n`` queries of the demo set, repeated in order when it has fewer."""
    lines = (DEMO / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines if line.strip()]
    return [texts[i % len(texts)] for i in range(n)]


def old_package(into: Path, commit: str = OLD_COMMIT) -> Path | str:
    """The ``ragbench`` package as it was at ``commit``, exported under ``into`` (the folder
    to put on ``PYTHONPATH``), or why it cannot be (no git, a checkout without that commit)."""
    try:
        exported = subprocess.run(
            ["git", "-C", str(REPO), "archive", commit, "ragbench"], capture_output=True
        )
    except OSError as exc:
        return f"git archive {commit}: {exc.strerror or exc}"
    if exported.returncode != 0:
        said = exported.stderr.decode(errors="replace").strip().splitlines()
        return f"git archive {commit}: {said[0] if said else f'exit {exported.returncode}'}"
    with tarfile.open(fileobj=io.BytesIO(exported.stdout)) as files:
        files.extractall(into, filter="data")
    return into


@contextmanager
def running(
    db: Path, name: str, log: Path, package: Path | None = None
) -> Iterator[tuple[str, float]]:
    """``ragbench serve`` on the collection in its own process (the package under ``package``
    when given, else this checkout's), its stderr to ``log``; yields its URL and the seconds
    it took to listen."""
    env = dict(os.environ)
    if package is not None:  # run from there, so that its ragbench is the one imported
        env["PYTHONPATH"] = str(package)
    command = [sys.executable, "-m", "ragbench.cli", "serve", "--collection", name]
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as stderr:
        server = subprocess.Popen(
            [*command, "--db", str(db), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            cwd=package or REPO,
        )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+", line)
        if found is None:
            error = log.read_text(encoding="utf-8", errors="replace")
            raise RuntimeError(f"ragbench serve did not start: {line}{error}".strip())
        yield found.group(), time.perf_counter() - started
    finally:
        server.terminate()
        server.wait(timeout=60)


def one_at_a_time(url: str, queries: list[str], k: int) -> dict[str, Any]:
    """``queries`` one after another over one connection: wall time per request at the
    client (and the search's own, ``took_ms``)."""
    import httpx

    wall, took = [], []
    with httpx.Client(base_url=url, trust_env=False, timeout=60) as client:
        for text in queries:
            sent = time.perf_counter()
            reply = client.post("/search", json={"query": text, "k": k})
            wall.append((time.perf_counter() - sent) * 1000)
            reply.raise_for_status()
            took.append(reply.json()["took_ms"])
    return {
        "first_ms": round(wall[0], 2),
        "p50_ms": round(float(np.percentile(wall, 50)), 2),
        "p95_ms": round(float(np.percentile(wall, 95)), 2),
        "server_p50_ms": round(float(np.percentile(took, 50)), 2),
    }


def _cause(exc: BaseException) -> str:
    """The exception's name, and the OS error under it (``ReadError (ConnectionResetError)``)."""
    inner: BaseException | None = exc
    while inner is not None and not isinstance(inner, OSError):
        inner = inner.__cause__ or inner.__context__
    shown = type(exc).__name__
    return shown if inner is None else f"{shown} ({type(inner).__name__})"


def at_once(url: str, queries: list[str], k: int, concurrency: int) -> dict[str, Any]:
    """``queries`` in waves of ``concurrency`` requests sent at the same moment (a burst of
    clients), each on a new connection: errors by kind, latency of the requests answered, and
    requests answered per second."""
    import httpx

    fresh = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    with httpx.Client(base_url=url, limits=fresh, trust_env=False, timeout=60) as client:

        def one(together: threading.Barrier, text: str) -> tuple[float, str | None]:
            together.wait()
            sent = time.perf_counter()
            try:
                reply = client.post("/search", json={"query": text, "k": k})
            except httpx.HTTPError as exc:
                return time.perf_counter() - sent, _cause(exc)
            error = None if reply.status_code == 200 else f"status {reply.status_code}"
            return time.perf_counter() - sent, error

        done: list[tuple[float, str | None]] = []
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            for at in range(0, len(queries), concurrency):
                wave = queries[at : at + concurrency]
                done += pool.map(partial(one, threading.Barrier(len(wave))), wave)
        wall = time.perf_counter() - started
    answered = [seconds * 1000 for seconds, error in done if error is None]
    errors = Counter(error for _, error in done if error is not None)
    p50, p95 = np.percentile(answered, [50, 95]) if answered else (float("nan"),) * 2
    return {
        "requests": len(queries),
        "concurrency": concurrency,
        "errors": sum(errors.values()),
        "error_kinds": dict(errors.most_common()),
        "p50_ms": round(float(p50), 2),
        "p95_ms": round(float(p95), 2),
        "throughput": round(len(answered) / wall, 1),
    }


def serve_one(
    db: Path,
    name: str,
    label: str,
    package: Path | None,
    work: Path,
    sequential: list[str],
    burst: list[str],
    k: int,
    concurrency: int,
) -> dict[str, Any]:
    """One server's figures: start-up, one at a time, at once, tracebacks in its log."""
    import httpx

    log = work / f"{'old' if package else 'new'}-server.log"
    with running(db, name, log, package) as (url, startup_s):
        health = httpx.get(f"{url}/health", trust_env=False, timeout=60).json()
        has_metrics = httpx.get(f"{url}/metrics", trust_env=False, timeout=60).status_code == 200
        if has_metrics == (package is not None):  # the other package's server answered
            raise RuntimeError(f"{label}: /metrics {'found' if has_metrics else 'missing'}")
        alone = one_at_a_time(url, sequential, k)
        together = at_once(url, burst, k, concurrency)
    return {
        "server": label,
        "pipeline": health["pipeline"],
        "chunks": health["chunks"],
        "startup_s": round(startup_s, 2),
        **alone,
        "at_once": together,
        "tracebacks": log.read_text(encoding="utf-8", errors="replace").count("Traceback"),
    }


def measure(
    queries: int = 100,
    tiny: bool = False,
    k: int = 10,
    requests: int = 1000,
    concurrency: int = 50,
) -> dict[str, Any]:
    """Start this checkout's server, then the one at ``OLD_COMMIT``, on the demo collection;
    time ``queries`` searches one at a time and ``requests`` at ``concurrency`` at once."""
    embedder = HASHING if tiny else MINILM
    db, name, ingest_s = collection(embedder)
    sequential, burst = _queries(queries), _queries(requests)
    work = Path(tempfile.mkdtemp(prefix="ragbench-bench-serve-"))
    try:
        old = old_package(work / "old")
        servers = [serve_one(db, name, NEW, None, work, sequential, burst, k, concurrency)]
        if isinstance(old, Path):  # the old server reads the collection format it wrote
            old_db, old_name, _ = collection(embedder, old)
            servers.append(
                serve_one(old_db, old_name, OLD, old, work, sequential, burst, k, concurrency)
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "embedder": embedder["model"] if "model" in embedder else embedder["kind"],
        "pipeline": servers[0]["pipeline"],
        "chunks": servers[0]["chunks"],
        "queries": queries,
        "k": k,
        "requests": requests,
        "concurrency": concurrency,
        "old_commit": OLD_COMMIT,
        "old_missing": None if isinstance(old, Path) else old,
        "ingest_s": round(ingest_s, 1),
        "servers": servers,
        "target_p50_ms": 100.0,
    }


# ---------------------------------------------------------------- RESULTS.md

ALONE = ("server", "start-up (s)", "first request (ms)", "p50 (ms)", "p95 (ms)", "server p50 (ms)")
TOGETHER = (
    "server",
    "errors",
    "of which",
    "p50 (ms)",
    "p95 (ms)",
    "answered per s",
    "tracebacks in its log",
)


def _kinds(found: dict[str, int]) -> str:
    return ", ".join(f"{count:,} {kind}" for kind, count in found.items()) or "–"


def draw(section: Figures) -> Lines:
    """Latency one at a time and under a burst of clients, this checkout's server beside the
    one it replaced."""
    s = section
    servers = s["servers"]
    alone = [
        (
            x["server"],
            num(x["startup_s"], 2),
            num(x["first_ms"], 1),
            num(x["p50_ms"], 1),
            num(x["p95_ms"], 1),
            num(x["server_p50_ms"], 1),
        )
        for x in servers
    ]
    together = [
        (
            x["server"],
            num(x["at_once"]["errors"]),
            _kinds(x["at_once"]["error_kinds"]),
            num(x["at_once"]["p50_ms"], 1),
            num(x["at_once"]["p95_ms"], 1),
            num(x["at_once"]["throughput"], 1),
            num(x["tracebacks"]),
        )
        for x in servers
    ]
    new = servers[0]
    ingested = f"in {s['ingest_s']} s" if s["ingest_s"] else "by an earlier run"
    return [
        f"`ragbench serve` on a collection of the demo set ({num(s['chunks'])} chunks, "
        f"`{s['pipeline']}`, embedder `{s['embedder']}`; ingested once {ingested}, kept in the "
        "stage cache), two servers one after the other, each in its own process: "
        f"this checkout's and the one at commit {s['old_commit']} (the standard library's "
        "`http.server`, exported with `git archive` and run from there). Timed at the client.",
        "",
        f"One at a time: {s['queries']} `POST /search` requests (k={s['k']}) one after another "
        "over one connection.",
        "",
        table(ALONE, alone),
        "",
        f"At once: {num(s['requests'])} `POST /search` requests (k={s['k']}) in waves of "
        f"{s['concurrency']} sent at the same moment from {s['concurrency']} threads, each on a "
        "new connection; errors are the requests that got no 200 (a reset, a refused "
        "connection, a timeout, an error status), latency is that of the requests answered.",
        "",
        table(TOGETHER, together),
        "",
        *(
            [f"The server at commit {s['old_commit']} did not run: {s['old_missing']}.", ""]
            if s.get("old_missing")
            else []
        ),
        f"Targets (this checkout's server): p50 < {s['target_p50_ms']:.0f} ms one at a time "
        f"{met(new['p50_ms'], s['target_p50_ms'], lower_is_better=True)}; no error at "
        f"{s['concurrency']} at once {met(new['at_once']['errors'], 0, lower_is_better=True)}.",
    ]


SERVE = part("serve", "Search server: `ragbench serve` on the demo collection", draw)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_serve")
    parser.add_argument("--queries", type=int, default=100, help="one at a time")
    parser.add_argument("--requests", type=int, default=1000, help="at once")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--tiny", action="store_true", help="hashing embedder: no model")
    args = parser.parse_args(argv)
    found = measure(args.queries, args.tiny, requests=args.requests, concurrency=args.concurrency)
    print(f"{found['pipeline']}, {found['chunks']} chunks (ingest {found['ingest_s']} s)")
    for x in found["servers"]:
        burst = x["at_once"]
        print(
            f"{x['server']}: startup {x['startup_s']} s; one at a time p50 {x['p50_ms']} ms, "
            f"p95 {x['p95_ms']} ms; {burst['requests']} at {burst['concurrency']} at once: "
            f"{burst['errors']} errors ({_kinds(burst['error_kinds'])}), p50 {burst['p50_ms']} "
            f"ms, p95 {burst['p95_ms']} ms, {burst['throughput']} answered/s; "
            f"{x['tracebacks']} tracebacks in its log"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
