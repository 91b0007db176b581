"""Where HTTP components may send API keys: the one credential and endpoint policy.

A config — possibly someone else's YAML — names a *credential*, never a key and never an
arbitrary environment variable. A credential is

- an entry of the user's credentials file (``$RAGBENCH_CREDENTIALS``, else
  ``$XDG_CONFIG_HOME/ragbench/credentials.toml``, else ``~/.config/ragbench/credentials.toml``)::

      [lab]                                        # the name a config uses: credential: lab
      api_key = "sk-..."                           # or api_key_env = "LAB_KEY"
      base_urls = ["https://llm.lab.example/v1"]   # where it may be sent (optional)

- or one of the allowed environment variables, looked up when the file has no such entry:
  ``OPENAI_API_KEY``, ``RAGBENCH_API_KEY`` and ``RAGBENCH_<NAME>_API_KEY`` (``NAME`` in capitals,
  digits and underscores).

A key is sent only

1. over https, or over plain http to a loopback host (127.0.0.0/8, ::1, ``localhost``); and
2. to a loopback host or to an origin (scheme, host, port) its credential is bound to: a file
   entry's ``base_urls``; for the variable ``X_API_KEY``, the URL in ``X_BASE_URL`` when that is
   set (``OPENAI_BASE_URL``, ``RAGBENCH_BASE_URL``, ``RAGBENCH_<NAME>_BASE_URL``), and for
   ``OPENAI_API_KEY`` also ``https://api.openai.com``. An unbound credential goes to loopback
   hosts only.

Without a credential any http(s) URL is allowed (nothing secret is attached). Violations are
:class:`ConfigError` naming the key path, raised when a config is validated (so ``--dry-run``
fails too). A component config gets this by deriving from :class:`EndpointOptions`; at call
time it asks :func:`resolve_endpoint` (or ``EndpointOptions.endpoint``) for the URL and key.
A client built on the ``openai`` SDK must pass ``api_key`` explicitly (a placeholder when the
endpoint has none): given ``None`` the SDK reads ``OPENAI_API_KEY`` itself, past this policy.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

from pydantic import BaseModel, model_validator

from ragbench.errors import ConfigError
from ragbench.registry import ConfigModel

__all__ = [
    "ALLOWED_ENV",
    "Endpoint",
    "EndpointOptions",
    "credentials_path",
    "describe_endpoints",
    "is_loopback",
    "resolve_endpoint",
]

ALLOWED_ENV = "OPENAI_API_KEY, RAGBENCH_API_KEY, RAGBENCH_<NAME>_API_KEY"
_ENV_NAME = re.compile(r"OPENAI_API_KEY|RAGBENCH(_[A-Z0-9]+)*_API_KEY")
_DEFAULT_ORIGINS: dict[str, tuple[str, ...]] = {"OPENAI_API_KEY": ("https://api.openai.com",)}
_FILE_KEYS = ("api_key", "api_key_env", "base_urls")
_PORTS = {"http": 80, "https": 443}
_UNSAFE_URL = re.compile(r"[\s\\\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Endpoint:
    """A checked endpoint: its base URL and the API key to send there (never shown in repr)."""

    url: str
    api_key: str | None = field(default=None, repr=False)
    credential: str | None = None


@dataclass(frozen=True)
class _Credential:
    name: str
    origins: tuple[str, ...]  # where, besides loopback hosts, the key may go
    source: str  # the environment variable holding the key
    hint: str  # how to allow another origin
    value: str | None = field(default=None, repr=False)  # the key itself, when in the file


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a URL's host name) is ``localhost`` or a loopback IP address."""
    host = host.lower().strip("[]")
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _split(url: str, where: str) -> SplitResult:
    """``url`` parsed, if it is a plain http(s) URL: no credentials, spaces or backslashes."""
    expected = f"{where}: expected an http:// or https:// URL"
    if not isinstance(url, str) or _UNSAFE_URL.search(url):
        raise ConfigError(f"{expected} without spaces, controls or backslashes, got {url!r}")
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018  # raises on a malformed port
    except ValueError:
        raise ConfigError(f"{expected} with a numeric port, got {url!r}") from None
    if parts.scheme not in _PORTS or not parts.hostname:
        raise ConfigError(f"{expected} with a host, got {url!r}")
    if "@" in parts.netloc:
        raise ConfigError(f"{expected} without user:password@, got {url!r}")
    return parts


def _origin(parts: SplitResult) -> str:
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    port = parts.port or _PORTS[parts.scheme]
    return f"{parts.scheme}://{shown}" + ("" if port == _PORTS[parts.scheme] else f":{port}")


def credentials_path() -> Path:
    """The user's credentials file (which need not exist)."""
    given = os.environ.get("RAGBENCH_CREDENTIALS")
    if given:
        return Path(given).expanduser()
    config_home = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config_home) / "ragbench" / "credentials.toml"


def _file_entries(path: Path) -> dict[str, Any]:
    """The credentials file's tables by name ({} when there is no file)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if os.environ.get("RAGBENCH_CREDENTIALS"):
            raise ConfigError(f"{path}: no such credentials file (RAGBENCH_CREDENTIALS)") from None
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML ({' '.join(str(exc).split())})") from None


def _from_file(name: str, entry: Any, path: Path) -> _Credential:
    where = f"{path}: [{name}]"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: expected a table with api_key or api_key_env")
    for key in entry:
        if key not in _FILE_KEYS:
            raise ConfigError(f"{where}.{key}: unknown key (allowed: {', '.join(_FILE_KEYS)})")
    if ("api_key" in entry) == ("api_key_env" in entry):
        raise ConfigError(f"{where}: give api_key or api_key_env (one of them)")
    for key in ("api_key", "api_key_env"):
        if key in entry and not (isinstance(entry[key], str) and entry[key]):
            raise ConfigError(f"{where}.{key}: expected a non-empty string")
    urls = entry.get("base_urls", [])
    if not isinstance(urls, list):
        raise ConfigError(f"{where}.base_urls: expected a list of URLs")
    origins = tuple(_origin(_split(u, f"{where}.base_urls[{i}]")) for i, u in enumerate(urls))
    return _Credential(
        name,
        origins,
        source=entry.get("api_key_env", ""),
        hint=f"add it to base_urls of [{name}] in {path}",
        value=entry.get("api_key"),
    )


def _credential(name: str, where: str) -> _Credential:
    """The credential called ``name``: a credentials-file entry, else an allowed variable."""
    path = credentials_path()
    entries = _file_entries(path)
    if name in entries:
        return _from_file(name, entries[name], path)
    if not _ENV_NAME.fullmatch(name):
        raise ConfigError(
            f"{_at(where, 'credential')}: unknown credential {name!r}: not an entry of {path} "
            f"and not an allowed environment variable ({ALLOWED_ENV})"
        )
    variable = name.removesuffix("_API_KEY") + "_BASE_URL"
    bound = os.environ.get(variable)
    origins = _DEFAULT_ORIGINS.get(name, ())
    if bound:
        origins += (_origin(_split(bound, f"environment variable {variable}")),)
    return _Credential(name, origins, source=name, hint=f"set {variable} to the URL it is for")


def _check(parts: SplitResult, credential: _Credential, where: str) -> None:
    """Raise unless ``credential`` may be sent to the URL ``parts``."""
    url = parts.geturl()
    loopback = is_loopback(parts.hostname or "")
    if parts.scheme == "http" and not loopback:
        raise ConfigError(
            f"{_at(where, 'base_url')}: {url} is plain http to a non-loopback host; API keys "
            "are sent only over https, or over http to 127.0.0.0/8, ::1 and localhost"
        )
    origin = _origin(parts)
    if not loopback and origin not in credential.origins:
        allowed = ", ".join(credential.origins) or "no other host"
        raise ConfigError(
            f"{_at(where, 'base_url')}: credential {credential.name!r} may not be sent to "
            f"{origin}; it goes to loopback hosts and {allowed} ({credential.hint})"
        )


def _key(credential: _Credential, where: str) -> str:
    """The key of ``credential``, checked to be one printable token."""
    key = credential.value
    if key is None:
        key = os.environ.get(credential.source, "").strip()
        if not key:
            raise ConfigError(
                f"{_at(where, 'credential')}: environment variable {credential.source} is not "
                f"set (credential {credential.name!r})"
            )
    if not all("\x21" <= c <= "\x7e" for c in key):
        raise ConfigError(
            f"{_at(where, 'credential')}: the key of {credential.name!r} must be printable "
            "ASCII without spaces"
        )
    return key


def resolve_endpoint(base_url: str, credential: str | None, where: str) -> Endpoint:
    """The endpoint at ``base_url`` with the key of ``credential`` (None: no key), after the
    policy allows it; errors are ``ConfigError`` naming ``where`` (a key path like
    ``sweep.reranker[0]``) and the offending key."""
    parts = _split(base_url, _at(where, "base_url"))
    if credential is None:
        return Endpoint(base_url)
    found = _credential(credential, where)
    _check(parts, found, where)
    return Endpoint(base_url, _key(found, where), credential)


def _check_endpoint(base_url: str, credential: str | None, where: str) -> None:
    """The policy without reading the key (a config may be validated where it is not set)."""
    parts = _split(base_url, _at(where, "base_url"))
    if credential is not None:
        _check(parts, _credential(credential, where), where)


_REMOVED = {
    "api_key_env": "configs do not name environment variables; name a credential instead "
    f"(credential: NAME, an entry of the credentials file or one of {ALLOWED_ENV})",
    "api_key": "configs never hold keys; name a credential instead (credential: NAME)",
}


class EndpointOptions(ConfigModel):
    """Config fields of a component that calls an HTTP endpoint: ``base_url`` and the name of
    the ``credential`` whose key it sends. Validation applies the policy of this module."""

    base_url: str
    credential: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for key, why in _REMOVED.items():
                if key in data:
                    raise ValueError(f"@{key}: {why}")
        return data

    @model_validator(mode="after")
    def _policy(self) -> EndpointOptions:
        try:
            _check_endpoint(self.base_url, self.credential, "")
        except ConfigError as exc:
            message = str(exc)  # a file's or variable's problem: under the credential key
            if not message.startswith(("base_url:", "credential:")):
                message = f"credential: {message}"
            raise ValueError(f"@{message}") from None
        return self

    def endpoint(self, where: str) -> Endpoint:
        """The checked endpoint with its key (``where``: the key path, for errors)."""
        return resolve_endpoint(self.base_url, self.credential, where)


def _endpoints(prefix: str, value: Any) -> list[str]:
    if isinstance(value, EndpointOptions):
        origin = _origin(urlsplit(value.base_url))
        key = f"credential {value.credential}" if value.credential else "no key"
        found = [f"{prefix}: {origin} ({key})"]
    else:
        found = []
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            found += _endpoints(f"{prefix}.{name}", getattr(value, name))
    return found


def describe_endpoints(configs: Mapping[str, BaseModel]) -> str:
    """Every endpoint in ``configs`` (axis → component config) and the credential it sends,
    e.g. ``reranker: https://api.openai.com (credential OPENAI_API_KEY)``; ``-`` for none."""
    found = [line for axis, config in configs.items() for line in _endpoints(axis, config)]
    return "; ".join(dict.fromkeys(found)) or "-"
