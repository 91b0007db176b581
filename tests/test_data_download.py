"""BEIR download against a real local HTTP server: verify, unpack safely, leave nothing behind."""

from __future__ import annotations

import hashlib
import http.server
import logging
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.data.beir import load_beir
from ragbench.data.download import download_beir
from ragbench.errors import ConfigError, RagbenchError
from tests.test_data_beir import make_beir


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def www(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(base URL, folder it serves) of an HTTP server on 127.0.0.1 in a thread."""
    folder = tmp_path / "www"
    folder.mkdir()

    def handler(*args: object) -> _Quiet:
        return _Quiet(*args, directory=str(folder))  # type: ignore[arg-type]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/beir", folder / "beir"
    server.shutdown()
    server.server_close()
    thread.join()


def publish(folder: Path, name: str, tmp_path: Path, extra: dict[str, str] | None = None) -> str:
    """Zip a small BEIR set as ``folder/name.zip`` (members under ``name/``); returns its sha256."""
    source = make_beir(tmp_path / "build" / name)
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"{name}.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                zipped.write(path, f"{name}/{path.relative_to(source).as_posix()}")
        for member, text in (extra or {}).items():
            zipped.writestr(member, text)
    return hashlib.sha256(archive.read_bytes()).hexdigest()


def test_download_verify_unpack_and_skip(www: tuple[str, Path], tmp_path: Path) -> None:
    url, folder = www
    digest = publish(folder, "scifact", tmp_path, {"__MACOSX/._junk": "x"})
    dest = tmp_path / "data"
    result = download_beir("scifact", dest, base_url=url, sha256=digest, progress=False)
    assert (result.downloaded, result.verified) == (True, True)
    assert result.path == dest / "scifact" and result.url == f"{url}/scifact.zip"
    assert sorted(p.name for p in dest.iterdir()) == ["scifact"]
    assert sorted(p.name for p in result.path.iterdir()) == [
        ".ragbench",  # marked and sealed as a download (ragbench.owned)
        "corpus.jsonl",
        "qrels",
        "queries.jsonl",
    ]
    assert len(load_beir(result.path).queries) == 2
    again = download_beir("scifact", dest, base_url=url, sha256=digest, progress=False)
    assert (again.downloaded, again.verified) == (False, False)
    (result.path / "queries.jsonl").write_text("damaged", encoding="utf-8")  # as downloaded: no
    forced = download_beir("scifact", dest, base_url=url, sha256=digest, force=True, progress=False)
    assert forced.downloaded and len(load_beir(forced.path).queries) == 2
    assert sorted(p.name for p in dest.iterdir()) == ["scifact"]


def test_checksum_mismatch_leaves_nothing(www: tuple[str, Path], tmp_path: Path) -> None:
    url, folder = www
    publish(folder, "scifact", tmp_path)
    dest = tmp_path / "data"
    # the registered checksum is the official archive's, which the test archive is not
    with pytest.raises(RagbenchError, match=r"scifact.zip: sha256 mismatch \(expected 536e1444"):
        download_beir("scifact", dest, base_url=url, progress=False)
    assert list(dest.iterdir()) == []
    with pytest.raises(RagbenchError, match="sha256 mismatch"):
        download_beir("scifact", dest, base_url=url, sha256="0" * 64, progress=False)
    assert list(dest.iterdir()) == []


def test_http_error_names_url_and_status(www: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = www
    dest = tmp_path / "data"
    with pytest.raises(RagbenchError, match=rf"{url}/nfcorpus.zip: download failed with HTTP 404"):
        download_beir("nfcorpus", dest, base_url=url, progress=False)
    assert list(dest.iterdir()) == []


def test_unsafe_or_broken_archives_are_rejected(www: tuple[str, Path], tmp_path: Path) -> None:
    url, folder = www
    dest = tmp_path / "data"
    for member in ("../evil.txt", "/etc/evil.txt", "fiqa/../../evil.txt"):
        publish(folder, "fiqa", tmp_path / member.replace("/", "_"), {member: "boom"})
        with pytest.raises(RagbenchError, match=r"unsafe member .*absolute path or '\.\.'"):
            download_beir("fiqa", dest, base_url=url, progress=False)
        assert list(dest.iterdir()) == []
    assert not (tmp_path / "evil.txt").exists()
    (folder / "fiqa.zip").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(RagbenchError, match="not a readable zip archive"):
        download_beir("fiqa", dest, base_url=url, progress=False)
    assert list(dest.iterdir()) == []


def test_unknown_checksum_is_a_warning_and_env_url(
    www: tuple[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, folder = www
    publish(folder, "arguana", tmp_path)
    monkeypatch.setenv("RAGBENCH_BEIR_URL", url)
    monkeypatch.setenv("RAGBENCH_DATA", str(tmp_path / "cache"))
    with caplog.at_level(logging.WARNING):
        result = download_beir("arguana", progress=False)
    assert result.path == tmp_path / "cache" / "arguana" and not result.verified
    assert "no known checksum" in caplog.text
    with pytest.raises(ConfigError, match="unknown BEIR dataset 'scifakt'; known: arguana"):
        download_beir("scifakt")


def test_cli_download(
    www: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, folder = www
    digest = publish(folder, "scifact", tmp_path)
    dest = tmp_path / "data"
    args = ["datasets", "download", "scifact", "--dir", str(dest), "--url", url]
    assert main([*args, "--sha256", digest]) == 0
    out = capsys.readouterr().out
    assert "scifact: downloaded to" in out and "(sha256 verified)" in out
    assert main([*args, "--sha256", digest]) == 0
    assert "already in" in capsys.readouterr().out
    assert main(["datasets", "download", "nfcorpus", "--dir", str(dest), "--url", url]) == 1
    assert f"{url}/nfcorpus.zip: download failed with HTTP 404" in capsys.readouterr().err
    assert main(["datasets", "download", "nope", "--dir", str(dest)]) == 2
