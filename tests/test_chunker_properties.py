"""Properties every chunker keeps on arbitrary text: exact offsets, coverage, sizes, overlap."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from ragbench.text.chunkers import build_chunker
from ragbench.types import Chunk, Document

PIECES = [
    "word", "Word", "a", "I", "Dr.", "e.g.", "3.14", "v2.0", ".", "!", "?", "...", '"', ")",
    " ", "  ", "\t", "\n", "\n\n", "\r\n", "# ", "- ", "1. ", "| ", "é", "Ñandú", "日本語", "。",
    "\u00a0", "\u2029", "😀",
]  # fmt: skip
TEXTS = st.one_of(
    st.text(),
    st.lists(st.sampled_from(PIECES), max_size=80).map("".join),
)
SIZES = st.integers(1, 40).flatmap(lambda size: st.tuples(st.just(size), st.integers(0, size - 1)))
SETTINGS = settings(max_examples=60, deadline=None)


def chunk(spec: dict, text: str) -> tuple[Document, list[Chunk]]:
    doc = Document(id="p", text=text, metadata={"k": 1})
    chunks = build_chunker(spec).chunk(doc)
    assert chunks == build_chunker(spec).chunk(doc)  # deterministic, ids included
    for i, c in enumerate(chunks):
        assert doc.text[c.start : c.end] == c.text
        assert c.text and c.text == c.text.strip()
        assert (c.id, c.index, c.metadata["k"]) == (f"p:chunk-{i}", i, 1)
    return doc, chunks


def assert_covers(text: str, chunks: Sequence[Chunk]) -> None:
    covered = {i for c in chunks for i in range(c.start, c.end)}
    missing = [i for i, ch in enumerate(text) if not ch.isspace() and i not in covered]
    assert not missing, f"uncovered characters at {missing[:5]}"


def assert_ordered(chunks: Sequence[Chunk], max_shared: int) -> None:
    for prev, nxt in itertools.pairwise(chunks):
        assert prev.start <= nxt.start and prev.end <= nxt.end
        assert max(0, prev.end - nxt.start) <= max_shared


@SETTINGS
@given(TEXTS)
def test_none(text: str) -> None:
    _, chunks = chunk({"kind": "none"}, text)
    assert [c.text for c in chunks] == ([text.strip()] if text.strip() else [])


@SETTINGS
@given(TEXTS, SIZES)
def test_fixed_chars(text: str, sizes: tuple[int, int]) -> None:
    size, overlap = sizes
    _, chunks = chunk({"kind": "fixed", "size": size, "overlap": overlap}, text)
    assert_covers(text, chunks)
    assert all(len(c.text) <= size for c in chunks)
    # Each chunk is one window of the text, trimmed; windows advance by size - overlap and
    # share exactly `overlap` characters; windows with only whitespace make no chunk.
    step = size - overlap
    windows = [(i, min(i + size, len(text))) for i in range(0, max(len(text) - overlap, 1), step)]
    kept = [(a, b) for a, b in windows if text[a:b].strip()]
    assert len(chunks) == len(kept)
    for c, (a, b) in zip(chunks, kept, strict=True):
        assert a <= c.start < c.end <= b
        assert text[a : c.start].isspace() or a == c.start
        assert text[c.end : b].isspace() or c.end == b
    for prev, nxt in itertools.pairwise(chunks):
        gap = text[prev.end : nxt.start]
        assert nxt.start <= prev.end or gap.isspace()


@SETTINGS
@given(TEXTS, SIZES)
def test_fixed_words(text: str, sizes: tuple[int, int]) -> None:
    size, overlap = sizes
    _, chunks = chunk({"kind": "fixed", "size": size, "overlap": overlap, "unit": "words"}, text)
    assert_covers(text, chunks)
    assert all(len(c.text.split()) <= size for c in chunks)


@SETTINGS
@given(TEXTS, SIZES, st.sampled_from(["start", "end"]))
def test_recursive_chars(text: str, sizes: tuple[int, int], keep: str) -> None:
    size, overlap = sizes
    spec = {"kind": "recursive", "size": size, "overlap": overlap, "keep_separator": keep}
    _, chunks = chunk(spec, text)
    assert_covers(text, chunks)
    assert all(len(c.text) <= size for c in chunks)
    assert_ordered(chunks, overlap)


@SETTINGS
@given(TEXTS, SIZES)
def test_recursive_without_character_fallback(text: str, sizes: tuple[int, int]) -> None:
    size, overlap = sizes
    spec = {"kind": "recursive", "size": size, "overlap": overlap, "separators": ["\n", " "]}
    _, chunks = chunk(spec, text)
    assert_covers(text, chunks)
    # Only a piece that no separator can split may exceed the size.
    assert all(len(c.text) <= size or not any(ch in c.text for ch in "\n ") for c in chunks)


@SETTINGS
@given(TEXTS, SIZES)
def test_sentence_chars(text: str, sizes: tuple[int, int]) -> None:
    size, overlap = sizes
    _, chunks = chunk({"kind": "sentence", "size": size, "overlap": overlap}, text)
    assert_covers(text, chunks)
    assert all(len(c.text) <= size for c in chunks)
    assert_ordered(chunks, overlap)


@SETTINGS
@given(TEXTS, st.integers(0, 4))
def test_sentence_window(text: str, window: int) -> None:
    _, chunks = chunk({"kind": "sentence_window", "window": window}, text)
    assert_covers(text, chunks)
    assert_ordered(chunks, 0)
    for c in chunks:
        start, end = c.metadata["window_start"], c.metadata["window_end"]
        assert text[start:end] == c.metadata["window"]
        assert start <= c.start and c.end <= end


@settings(max_examples=30, deadline=None)
@given(TEXTS, st.integers(0, 2), st.floats(0, 100))
def test_semantic_with_hashing(text: str, buffer: int, percentile: float) -> None:
    spec = {
        "kind": "semantic",
        "buffer": buffer,
        "percentile": percentile,
        "embedder": {"kind": "hashing", "dim": 64},
    }
    _, chunks = chunk(spec, text)
    assert_covers(text, chunks)
    assert_ordered(chunks, 0)
