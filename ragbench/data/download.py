"""Download the public BEIR datasets: stream, verify, unpack safely, move into place atomically.

``download_beir("scifact")`` fetches ``{base}/scifact.zip`` (``base`` is the UKP server unless
``RAGBENCH_BEIR_URL`` or ``base_url`` says otherwise) into a temporary file next to the target,
with a ``tqdm`` progress bar, checks its sha256 when one is known (a mismatch deletes the file and
raises), rejects archive members that would land outside the target (absolute paths, ``..``,
symlinks), seals the unpacked folder as a download (``ragbench.owned.seal``: the size and SHA-256
of each file) and renames it to ``<dir>/<name>`` only when everything succeeded: an interrupted
download leaves nothing behind. A download already present is kept unless ``force``, and
``force`` replaces only a download (its own files, changed or not): a folder of the user's in its
place, or a download that files were added to, stays (one line says so). Sets go to ``data_dir()``:
``RAGBENCH_DATA`` or ``~/.cache/ragbench/datasets``.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import shutil
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from tqdm.auto import tqdm

from ragbench.data.beir import is_beir
from ragbench.errors import ConfigError, DataError, RagbenchError, path_problem
from ragbench.owned import added, owned, seal

__all__ = ["BEIR_DATASETS", "BEIR_URL", "Download", "data_dir", "download_beir"]

logger = logging.getLogger(__name__)

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets"

# name → sha256 of {name}.zip where a trustworthy source records it, else None (not verified).
# scifact: the official release is md5 5f7d1de60b170fc8027bb7898e2efca1, 2,816,079 B.
BEIR_DATASETS: dict[str, str | None] = {
    "arguana": None,
    "climate-fever": None,
    "cqadupstack": None,
    "dbpedia-entity": None,
    "fever": None,
    "fiqa": None,
    "hotpotqa": None,
    "msmarco": None,
    "nfcorpus": None,
    "nq": None,
    "quora": None,
    "scidocs": None,
    "scifact": "536e14446a0ba56ed1398ab1055f39fe852686ecad24a6306c80c490fa8e0165",
    "trec-covid": None,
    "webis-touche2020": None,
}

_CHUNK = 1 << 20
_TIMEOUT = 60
_DOWNLOAD = "downloaded dataset"  # what the marker of a download says it holds


@dataclass(frozen=True, slots=True)
class Download:
    """Where a set is, whether it was fetched now (False: already there) and its sha256 was
    checked (False: skipped, or no known checksum)."""

    path: Path
    url: str
    downloaded: bool
    verified: bool


def data_dir() -> Path:
    """Where downloaded sets live: ``RAGBENCH_DATA`` or ``~/.cache/ragbench/datasets``;
    ``ConfigError`` naming the variable when its path cannot be looked at (``path_problem``)."""
    configured = os.environ.get("RAGBENCH_DATA")
    if not configured:
        return Path.home() / ".cache/ragbench/datasets"
    problem = path_problem(Path(configured).expanduser())
    if problem is not None:
        raise ConfigError(f"RAGBENCH_DATA {configured}: {problem}")
    return Path(configured).expanduser()


def download_beir(
    name: str,
    directory: str | os.PathLike[str] | None = None,
    *,
    base_url: str | None = None,
    sha256: str | None = None,
    force: bool = False,
    progress: bool = True,
) -> Download:
    """Fetch BEIR set ``name`` into ``directory/name`` (default ``data_dir()``).

    ``sha256`` overrides the recorded checksum. Raises ``ConfigError`` for an unknown name and
    ``RagbenchError`` when the download fails (the message names the URL and the HTTP status),
    the checksum differs or the archive is unsafe or broken; nothing is left behind then.
    ``ConfigError`` when ``directory/name`` holds something else than a download of the set
    (with ``force``: anything but a marked download without files added to it), which stays.
    """
    if name not in BEIR_DATASETS:
        raise ConfigError(f"unknown BEIR dataset {name!r}; known: {', '.join(BEIR_DATASETS)}")
    base = _base(base_url)
    url = f"{base.rstrip('/')}/{name}.zip"
    root = Path(directory) if directory is not None else data_dir()
    target = root / name
    if _present(target, name, force):
        return Download(target, url, downloaded=False, verified=False)
    expected = sha256 or BEIR_DATASETS[name]
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{name}-") as work:
        archive = Path(work) / f"{name}.zip"
        digest = _fetch(url, archive, progress)
        if expected is not None and digest != expected.lower():
            archive.unlink()
            raise RagbenchError(
                f"{url}: sha256 mismatch (expected {expected}, got {digest}); file deleted"
            )
        if expected is None:
            logger.warning("%s: no known checksum, the download could not be verified", url)
        unpacked = _unpack(archive, Path(work) / "unpacked", url)
        seal(unpacked, _DOWNLOAD)
        _install(unpacked, target)
    return Download(target, url, downloaded=True, verified=expected is not None)


def _base(base_url: str | None) -> str:
    """The URL sets are fetched under: ``base_url`` (``--url``), ``RAGBENCH_BEIR_URL`` or the
    UKP server; ``ConfigError`` naming where it came from when it is no http(s) URL (the check
    ``ingest`` makes of a URL, ``web.split_url``), before anything is written."""
    from ragbench.text.web import split_url

    configured = os.environ.get("RAGBENCH_BEIR_URL")
    where, base = ("--url", base_url) if base_url else ("RAGBENCH_BEIR_URL", configured)
    if not base:
        return BEIR_URL
    try:
        split_url(base, base)
    except DataError as exc:
        raise ConfigError(f"{where} {exc}") from None
    return base


def _present(target: Path, name: str, force: bool) -> bool:
    """Whether set ``name`` is downloaded at ``target`` already and is kept (not ``force``):
    a download ragbench marked, or one from before downloads were marked (the BEIR layout).
    ``ConfigError`` when ``target`` holds anything else, or with ``force`` anything but a marked
    download that holds no file added since (``owned.added``): what is there stays. An empty
    folder is no download (False)."""
    if not target.exists():
        return False
    if not target.is_dir():
        raise ConfigError(f"{target}: is a file, not the folder of dataset {name}")
    if not any(target.iterdir()):
        return False
    download = owned(target, _DOWNLOAD)
    if not download and not is_beir(target):
        raise ConfigError(
            f"{target}: holds files that are not a download of {name}; they stay (give "
            "another --dir, or move them)"
        )
    if not force:
        return True
    if not download or target.is_symlink():
        raise ConfigError(
            f"--force: {target} is no download ragbench marked (an older one, a copy or a "
            "link); it stays: delete it yourself to download again"
        )
    yours = added(target)
    if yours:
        more = f" and {len(yours) - 1} more" if yours[1:] else ""
        raise ConfigError(
            f"--force: {target} holds files the download did not ({yours[0]}{more}); it stays: "
            "move them out, or delete the folder yourself, to download again"
        )
    return False


def _fetch(url: str, path: Path, progress: bool) -> str:
    """Stream ``url`` into ``path``; returns the sha256 hex digest of the bytes (urllib is
    imported here: only a download needs it)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT) as response, open(path, "wb") as out:
            size = int(response.headers.get("Content-Length") or 0)
            return _copy(response, out, size, progress)
    except urllib.error.HTTPError as exc:
        raise RagbenchError(f"{url}: download failed with HTTP {exc.code} {exc.reason}") from None
    except (OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise RagbenchError(f"{url}: download failed ({reason})") from None


def _copy(source: IO[bytes], out: IO[bytes], size: int, progress: bool) -> str:
    digest = hashlib.sha256()
    bar = tqdm(total=size or None, unit="B", unit_scale=True, disable=not progress)
    with bar:
        while block := source.read(_CHUNK):
            digest.update(block)
            out.write(block)
            bar.update(len(block))
    return digest.hexdigest()


def _unpack(archive: Path, into: Path, url: str) -> Path:
    """Extract ``archive`` into ``into`` after checking every member; returns the dataset
    folder (the archive's single top-level folder, else ``into``)."""
    try:
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                _check_member(info, url)
            zipped.extractall(into)
    except (zipfile.BadZipFile, OSError) as exc:
        raise RagbenchError(f"{url}: not a readable zip archive ({exc})") from None
    shutil.rmtree(into / "__MACOSX", ignore_errors=True)
    entries = list(into.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else into


def _check_member(info: zipfile.ZipInfo, url: str) -> None:
    """Reject members that could land outside the extraction folder (zip-slip) or are links."""
    name = info.filename.replace("\\", "/")
    parts = PurePosixPath(name).parts
    if name.startswith("/") or ".." in parts or (parts and ":" in parts[0]):
        raise RagbenchError(f"{url}: unsafe member {info.filename!r} (absolute path or '..')")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise RagbenchError(f"{url}: unsafe member {info.filename!r} (a symbolic link)")


def _install(source: Path, target: Path) -> None:
    """Move ``source`` to ``target``, replacing an existing ``target`` only once it is ready."""
    if not target.exists():
        os.replace(source, target)
        return
    old = source.parent / ".replaced"
    os.replace(target, old)
    os.replace(source, target)
    shutil.rmtree(old)
