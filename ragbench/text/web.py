"""Fetching web pages politely for ``load("https://...")``: robots.txt, a size limit, a timeout.

``fetch`` gets one page over http(s) with httpx and returns its decoded text; the loader
(``ragbench.text.loaders.WebLoader``) turns HTML into visible text like ``HtmlLoader`` does for
files. Before a page is requested, its site's ``/robots.txt`` is read (``urllib.robotparser``;
redirects followed; a missing one allows everything, a 401/403 forbids the whole site and a
5xx stops the fetch, as crawlers do), and every redirect of the page is checked the same way.
A body is read in pieces and the request stops as soon as it passes ``max_bytes``, whatever
``Content-Length`` claims. Every failure is a one-line ``DataError`` naming the URL: a non-2xx
status, a page too large, a path robots.txt disallows, a timeout, a connection error or a
URL that is not one (a bad port, an unclosed IPv6 address). Credentials in a URL
(``user:password@``) are used for the request and never shown: ``redact`` replaces them in every
message and in the document's id. Requests to loopback hosts ignore proxy settings.
"""

from __future__ import annotations

import codecs
import re
import urllib.robotparser
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import SplitResult, urljoin, urlsplit

import httpx

from ragbench import __version__
from ragbench.endpoints import is_loopback
from ragbench.errors import DataError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TIMEOUT",
    "USER_AGENT",
    "Fetched",
    "fetch",
    "redact",
    "split_url",
]

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_TIMEOUT = 20.0
USER_AGENT = f"ragbench/{__version__}"
_MAX_REDIRECTS = 5
_ROBOTS_MAX_BYTES = 512 * 1024
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")


@dataclass(frozen=True)
class Fetched:
    """A fetched page: the URL it was finally served from, its media type and decoded text."""

    url: str
    content_type: str
    text: str


def fetch(
    url: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout: float = DEFAULT_TIMEOUT,
    robots: bool = True,
    user_agent: str = USER_AGENT,
) -> Fetched:
    """The page at ``url`` (redirects followed, each checked against robots.txt when
    ``robots``), its body at most ``max_bytes``, each request at most ``timeout`` seconds;
    ``Fetched.url`` is shown without credentials (``redact``)."""
    try:
        return _fetch(url, max_bytes, timeout, robots, user_agent)
    except DataError as exc:
        raise DataError(redact(str(exc))) from None


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it (``user:password@``) replaced by
    ``***``."""
    return _USERINFO.sub(r"\1***@", text)


def _fetch(url: str, max_bytes: int, timeout: float, robots: bool, user_agent: str) -> Fetched:
    if max_bytes < 1:
        raise DataError(f"{url}: max_bytes must be positive, got {max_bytes}")
    current = url
    rules: dict[str, urllib.robotparser.RobotFileParser] = {}
    for _ in range(_MAX_REDIRECTS + 1):
        parts = split_url(current, url)
        with _client(parts, timeout, user_agent) as client:
            if robots:
                origin = f"{parts.scheme}://{parts.netloc}"
                if origin not in rules:
                    rules[origin] = _robots(client, origin, url, timeout)
                if not rules[origin].can_fetch(user_agent, current):
                    raise DataError(f"{url}: disallowed by {origin}/robots.txt for {user_agent}")
            with _request(client, current, url, timeout) as response:
                if response.is_redirect and "location" in response.headers:
                    current = urljoin(current, response.headers["location"])
                    continue
                if not response.is_success:
                    reason = f" {response.reason_phrase}" if response.reason_phrase else ""
                    raise DataError(f"{url}: HTTP {response.status_code}{reason}")
                body = _body(response, url, max_bytes)
                media = response.headers.get("content-type", "").split(";")[0].strip().lower()
                text = body.decode(_encoding(response), errors="replace")
                return Fetched(redact(current), media, text)
    raise DataError(f"{url}: more than {_MAX_REDIRECTS} redirects")


def split_url(target: str, url: str) -> SplitResult:
    """``target`` (``url`` or a page it redirected to) in parts; ``DataError`` unless it is an
    http(s) URL with a host and a valid port."""
    try:
        parts = urlsplit(target)
        _ = parts.port  # reading it checks it: a number from 0 to 65535
    except ValueError as exc:
        raise DataError(f"{url}: not a valid URL{_at(target, url)} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DataError(f"{url}: not an http(s) URL: {target}")
    return parts


def _at(target: str, url: str) -> str:
    """Where a problem of ``url`` is, when it is at another URL (a redirect, robots.txt)."""
    return "" if target == url else f": {target}"


def _client(parts: SplitResult, timeout: float, user_agent: str) -> httpx.Client:
    """A client for the host of the URL in ``parts``: proxies from the environment unless it
    is a loopback one."""
    return httpx.Client(
        timeout=timeout,
        trust_env=not is_loopback(parts.hostname or ""),
        headers={"user-agent": user_agent},
        follow_redirects=False,
    )


def _encoding(response: httpx.Response) -> str:
    """The charset the response declares if Python knows it, else UTF-8."""
    try:
        return codecs.lookup(response.charset_encoding or "utf-8").name
    except LookupError:
        return "utf-8"


@contextmanager
def _request(
    client: httpx.Client, target: str, url: str, timeout: float, follow: bool = False
) -> Iterator[httpx.Response]:
    """A streamed GET of ``target``, closed on exit; network failures as one line."""
    try:
        request = client.build_request("GET", target)
        response = client.send(request, stream=True, follow_redirects=follow)
    except (httpx.InvalidURL, UnicodeError) as exc:  # a bad port, a host name IDNA refuses
        raise DataError(f"{url}: not a valid URL{_at(target, url)} ({exc})") from None
    except httpx.TimeoutException:
        raise DataError(f"{url}: no response from {target} within {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise DataError(f"{url}: cannot fetch {target}: {exc}") from None
    try:
        yield response
    finally:
        response.close()


def _body(response: httpx.Response, url: str, max_bytes: int) -> bytes:
    """The response body, stopping as soon as it exceeds ``max_bytes``."""
    limit = f"larger than the limit of {max_bytes:,} bytes (max_bytes)"
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise DataError(f"{url}: {int(declared):,} bytes, {limit}")
    chunks, size = [], 0
    try:
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise DataError(f"{url}: {limit}")
            chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise DataError(f"{url}: reading the response failed: {exc}") from None
    return b"".join(chunks)


def _robots(
    client: httpx.Client, origin: str, url: str, timeout: float
) -> urllib.robotparser.RobotFileParser:
    """The rules of ``origin``'s robots.txt (its first 512 KiB): all allowed when it is
    missing (a 4xx other than 401/403), nothing when access to it is refused (401, 403)."""
    where = f"{origin}/robots.txt"
    rules = urllib.robotparser.RobotFileParser(where)
    with _request(client, where, url, timeout, follow=True) as response:
        status = response.status_code
        if status >= 500 or status < 200 or 300 <= status < 400:
            raise DataError(f"{url}: {where} answered HTTP {status}; not fetching without it")
        data = bytearray()
        try:
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) >= _ROBOTS_MAX_BYTES:
                    break
        except httpx.HTTPError as exc:
            raise DataError(f"{url}: reading {where} failed: {exc}") from None
    if status < 300:
        lines = data[:_ROBOTS_MAX_BYTES].decode("utf-8", errors="replace").splitlines()
    else:  # access refused (401, 403): nothing may be fetched; missing: everything may
        lines = ["User-agent: *", "Disallow: /"] if status in (401, 403) else []
    rules.parse(lines)  # also marks the rules as read, which can_fetch needs
    return rules
