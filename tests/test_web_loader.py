"""`load("http://...")`: web pages from a loopback HTTP server the test runs (no network):
HTML to text, robots.txt, size limits, timeouts, redirects and one-line errors."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.errors import DataError
from ragbench.pipeline import RAGPipeline
from ragbench.text.loaders import WebLoader, load

PAGE = (
    "<html><head><title>Key rotation</title><script>track()</script></head>"
    "<body><h1>Rotating keys</h1><p>Run <b>kestrelctl keys rotate</b> every ninety days.</p>"
    "</body></html>"
)


@dataclass
class Route:
    """What the server answers on one path."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunked: bool = False  # stream the body without a Content-Length


class _Site(ThreadingHTTPServer):
    daemon_threads = True
    routes: dict[str, Route]
    requests: list[str]


class _Handler(BaseHTTPRequestHandler):
    server: _Site
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
            self._answer()

    def _answer(self) -> None:
        self.server.requests.append(self.path)
        route = self.server.routes.get(self.path, Route(404, b"not found"))
        time.sleep(route.delay)
        self.send_response(route.status)
        for key, value in route.headers.items():
            self.send_header(key, value)
        if route.chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(route.body), 4096):
                piece = route.body[start : start + 4096]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(route.body)))
        self.end_headers()
        self.wfile.write(route.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def running() -> Iterator[_Site]:
    """A loopback web site, serving in a thread."""
    server = _Site(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def site(running: _Site) -> _Site:
    """The site with fresh routes for one test: robots.txt allows all but /private."""
    running.requests = []
    running.routes = {
        "/robots.txt": Route(body=b"User-agent: *\nDisallow: /private\n"),
        "/page.html": Route(body=PAGE.encode(), headers={"Content-Type": "text/html"}),
    }
    return running


def _url(site: _Site, path: str) -> str:
    return f"http://127.0.0.1:{site.server_address[1]}{path}"


def _error(url: str, **options: object) -> str:
    with pytest.raises(DataError) as caught:
        load(url, **options)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(url)
    return message


def test_a_web_page_loads_as_its_visible_text(site: _Site) -> None:
    url = _url(site, "/page.html")
    loader = load(url)
    assert isinstance(loader, WebLoader)
    [doc] = list(loader)
    assert doc.id == url
    assert doc.text == "Rotating keys\n\nRun kestrelctl keys rotate every ninety days."
    assert doc.metadata == {"url": url, "format": "html", "title": "Key rotation"}
    assert loader.report.loaded == 1 and site.requests == ["/robots.txt", "/page.html"]


def test_plain_text_and_charset_are_honoured(site: _Site) -> None:
    body = "Café latency\r\nis low.".encode("latin-1")
    site.routes["/notes.txt"] = Route(
        body=body, headers={"Content-Type": "text/plain; charset=latin-1"}
    )
    [doc] = load(_url(site, "/notes.txt"))
    assert doc.text == "Café latency\nis low." and doc.metadata["format"] == "txt"


def test_redirects_are_followed_and_checked_against_robots(site: _Site) -> None:
    site.routes["/old"] = Route(301, headers={"Location": "/page.html"})
    [doc] = load(_url(site, "/old"))
    assert doc.id == _url(site, "/old") and doc.metadata["url"] == _url(site, "/page.html")
    site.routes["/sneaky"] = Route(302, headers={"Location": "/private/secret.html"})
    site.routes["/private/secret.html"] = Route(body=b"<p>secret</p>")
    assert "disallowed by" in _error(_url(site, "/sneaky"))
    assert "/private/secret.html" not in site.requests


def test_robots_txt_is_honoured(site: _Site) -> None:
    site.routes["/private/secret.html"] = Route(body=b"<p>secret</p>")
    message = _error(_url(site, "/private/secret.html"))
    assert message.endswith(f"disallowed by {_url(site, '/robots.txt')} for ragbench/0.1.0")
    assert site.requests == ["/robots.txt"]  # the page itself was never requested


@pytest.mark.parametrize(
    ("robots", "outcome"),
    [
        (Route(404), "loaded"),  # no robots.txt: everything may be fetched
        (Route(403), "disallowed by"),  # access to robots.txt refused: nothing may
        (Route(503), "answered HTTP 503"),  # unavailable: do not fetch
        (Route(body=b"User-agent: ragbench\nDisallow: /\n"), "disallowed by"),
        (Route(body=b"User-agent: otherbot\nDisallow: /\n"), "loaded"),
    ],
)
def test_robots_txt_status_decides(site: _Site, robots: Route, outcome: str) -> None:
    site.routes["/robots.txt"] = robots
    if outcome == "loaded":
        assert len(list(load(_url(site, "/page.html")))) == 1
    else:
        assert outcome in _error(_url(site, "/page.html"))


def test_non_2xx_is_one_line_naming_the_status(site: _Site) -> None:
    assert _error(_url(site, "/missing.html")).endswith("HTTP 404 Not Found")
    site.routes["/broken"] = Route(500, b"oops")
    assert "HTTP 500" in _error(_url(site, "/broken"))


def test_the_size_limit_stops_large_pages(site: _Site) -> None:
    big = b"<p>" + b"x" * 5000 + b"</p>"
    site.routes["/big.html"] = Route(body=big, headers={"Content-Type": "text/html"})
    site.routes["/stream.html"] = Route(
        body=big, headers={"Content-Type": "text/html"}, chunked=True
    )
    assert "larger than the limit of 1,000 bytes" in _error(_url(site, "/big.html"), max_bytes=1000)
    assert "larger than the limit" in _error(_url(site, "/stream.html"), max_bytes=1000)
    [doc] = load(_url(site, "/stream.html"), max_bytes=10_000)  # under the limit: fine
    assert len(doc.text) == 5000


def test_a_slow_page_times_out(site: _Site) -> None:
    site.routes["/slow.html"] = Route(body=b"<p>late</p>", delay=1.0)
    started = time.perf_counter()
    assert "no response from" in _error(_url(site, "/slow.html"), timeout=0.3)
    assert time.perf_counter() - started < 0.9


def test_unsupported_content_and_bad_urls(site: _Site) -> None:
    site.routes["/blob"] = Route(body=b"\x00\x01", headers={"Content-Type": "application/zip"})
    assert "unsupported content type 'application/zip'" in _error(_url(site, "/blob"))
    site.routes["/empty.html"] = Route(
        body=b"<script>x()</script>", headers={"Content-Type": "text/html"}
    )
    assert _error(_url(site, "/empty.html")).endswith("no visible text")
    closed = _url(site, "/page.html").replace(str(site.server_address[1]), "1")
    assert "cannot fetch" in _error(closed)


def test_a_pipeline_indexes_a_web_page(site: _Site, tmp_path: Path, capsys) -> None:
    url = _url(site, "/page.html")
    pipeline = RAGPipeline.from_config({"embedder": {"kind": "hashing"}})
    assert pipeline.index(load(url)).documents_indexed == 1
    assert pipeline.retrieve("how often do I rotate keys", k=1)[0].chunk.doc_id == url
    config = '{"embedder": {"kind": "hashing"}, "retriever": {"kind": "bm25"}}'
    db = ["--collection", "web", "--db", str(tmp_path)]
    assert main(["ingest", "--source", url, *db, "--config", config]) == 0
    assert "indexed 1" in capsys.readouterr().out
    assert main(["ingest", "--source", _url(site, "/missing"), *db]) == 2
    assert capsys.readouterr().err.strip().endswith("HTTP 404 Not Found")
