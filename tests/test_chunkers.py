"""Chunkers: concrete behaviour per kind, config validation, and the shared corpora."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from ragbench.errors import ConfigError
from ragbench.protocols import Chunker, Role
from ragbench.registry import components
from ragbench.text.chunkers import (
    RecursiveConfig,
    SemanticChunker,
    SemanticConfig,
    build_chunker,
    chunk_documents,
)
from ragbench.types import Chunk, Document

CORPORA = (
    Path(__file__).resolve().parents[2] / "shared" / "datasets" / "chunking_evaluation" / "corpora"
)
CHROMA_SEPARATORS = ["\n\n", "\n", ".", "?", "!", " ", ""]
HASHING = {"kind": "hashing", "dim": 256}


def check(doc: Document, chunks: Sequence[Chunk]) -> None:
    """The invariants every chunker keeps."""
    for i, c in enumerate(chunks):
        assert doc.text[c.start : c.end] == c.text
        assert c.text and c.text == c.text.strip()
        assert (c.id, c.doc_id, c.index) == (f"{doc.id}:chunk-{i}", doc.id, i)


def run(spec: dict, text: str, **metadata: object) -> list[Chunk]:
    doc = Document(id="doc", text=text, metadata=dict(metadata))
    chunks = build_chunker(spec).chunk(doc)
    check(doc, chunks)
    return chunks


def texts(spec: dict, text: str) -> list[str]:
    return [c.text for c in run(spec, text)]


# --- shared behaviour -------------------------------------------------------------------


def test_every_kind_is_registered() -> None:
    assert components("chunker").kinds() == [
        "fixed",
        "none",
        "recursive",
        "semantic",
        "sentence",
        "sentence_window",
    ]


ALL_SPECS = [
    {"kind": "none"},
    {"kind": "fixed", "size": 8, "overlap": 2},
    {"kind": "recursive", "size": 8, "overlap": 2},
    {"kind": "sentence", "size": 20, "overlap": 5},
    {"kind": "sentence_window", "window": 1},
    {"kind": "semantic", "embedder": HASHING},
]


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s["kind"])
@pytest.mark.parametrize("text", ["", "   ", "\n\n\t"])
def test_empty_documents_have_no_chunks(spec: dict, text: str) -> None:
    assert run(spec, text) == []


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s["kind"])
def test_metadata_is_inherited_and_inputs_untouched(spec: dict) -> None:
    metadata = {"source": "a.md", "lang": "en"}
    doc = Document(
        id="a", text="Alpha beta gamma. Delta epsilon zeta. Eta theta.", metadata=metadata
    )
    chunks = build_chunker(spec).chunk(doc)
    check(doc, chunks)
    assert chunks
    for c in chunks:
        assert {k: c.metadata[k] for k in metadata} == metadata
        assert c.metadata is not metadata
    assert doc.metadata == {"source": "a.md", "lang": "en"}


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s["kind"])
def test_chunking_is_deterministic(spec: dict) -> None:
    text = "One fish. Two fish.\n\nRed fish! Blue fish? " * 5
    assert run(spec, text) == run(spec, text)


def test_chunk_documents_loops_over_docs() -> None:
    docs = [Document(id="a", text="Hello there."), Document(id="b", text="General Kenobi.")]
    chunks = chunk_documents(build_chunker("none"), iter(docs))
    assert [(c.id, c.text) for c in chunks] == [
        ("a:chunk-0", "Hello there."),
        ("b:chunk-0", "General Kenobi."),
    ]


def test_build_chunker_accepts_config_objects() -> None:
    chunker = build_chunker(RecursiveConfig(size=10))
    assert isinstance(chunker, Chunker)
    assert chunker.config == RecursiveConfig(size=10, overlap=0)


# --- none ---------------------------------------------------------------------------------


def test_none_is_the_trimmed_document() -> None:
    (chunk,) = run({"kind": "none"}, "\n  Whole text.\nSecond line.  \n", source="x")
    assert (chunk.text, chunk.start, chunk.end) == ("Whole text.\nSecond line.", 3, 27)
    assert chunk.metadata == {"source": "x"}


# --- fixed --------------------------------------------------------------------------------


def test_fixed_chars_windows_with_overlap() -> None:
    chunks = run({"kind": "fixed", "size": 4, "overlap": 1}, "abcdefghij")
    assert [(c.text, c.start, c.end) for c in chunks] == [
        ("abcd", 0, 4),
        ("defg", 3, 7),
        ("ghij", 6, 10),
    ]


def test_fixed_stops_after_the_window_reaching_the_end() -> None:
    assert texts({"kind": "fixed", "size": 4, "overlap": 2}, "abcdefgh") == ["abcd", "cdef", "efgh"]
    assert texts({"kind": "fixed", "size": 4}, "abcdef") == ["abcd", "ef"]
    assert texts({"kind": "fixed", "size": 10}, "abc") == ["abc"]


def test_fixed_trims_and_drops_blank_windows() -> None:
    chunks = run({"kind": "fixed", "size": 4}, "ab      cd")
    assert [(c.text, c.start, c.end) for c in chunks] == [("ab", 0, 2), ("cd", 8, 10)]
    assert [c.id for c in chunks] == ["doc:chunk-0", "doc:chunk-1"]


def test_fixed_words() -> None:
    spec = {"kind": "fixed", "size": 2, "overlap": 1, "unit": "words"}
    assert texts(spec, " one two  three\nfour five ") == [
        "one two",
        "two  three",
        "three\nfour",
        "four five",
    ]


def test_fixed_tokens_cl100k() -> None:
    spec = {"kind": "fixed", "size": 2, "unit": "tokens", "tokenizer": "cl100k"}
    chunks = run(spec, "hello world foo bar")
    assert [(c.text, c.start, c.end) for c in chunks] == [
        ("hello world", 0, 11),
        ("foo bar", 12, 19),
    ]
    overlapping = {**spec, "size": 3, "overlap": 1}
    assert texts(overlapping, "one two three four five") == ["one two three", "three four five"]


def test_fixed_tokens_default_tokenizer() -> None:
    # The default is the default embedding model's (MiniLM, WordPiece) tokenizer.
    spec = {"kind": "fixed", "size": 2, "unit": "tokens"}
    assert texts(spec, "hello world foo bar") == ["hello world", "foo bar"]
    # "tokenization" is two word pieces: token + ##ization.
    assert texts({**spec, "size": 1}, "tokenization") == ["token", "ization"]


# --- recursive (hand-computed LangChain RecursiveCharacterTextSplitter behaviour) ---------


def test_recursive_separator_starts_the_next_piece() -> None:
    spec = {"kind": "recursive", "size": 9, "separators": [". ", ""]}
    assert texts(spec, "one. two. three.") == ["one. two", ". three."]


def test_recursive_keep_separator_end() -> None:
    spec = {"kind": "recursive", "size": 9, "separators": [". ", ""], "keep_separator": "end"}
    assert texts(spec, "one. two. three.") == ["one.", "two.", "three."]


def test_recursive_merges_words_up_to_size() -> None:
    chunks = run({"kind": "recursive", "size": 7}, "aaa bbb ccc")
    assert [(c.text, c.start, c.end) for c in chunks] == [("aaa bbb", 0, 7), ("ccc", 8, 11)]


def test_recursive_carries_overlap() -> None:
    spec = {"kind": "recursive", "size": 5, "overlap": 2}
    chunks = run(spec, "a b c d e f g")
    assert [c.text for c in chunks] == ["a b c", "c d", "d e", "e f", "f g"]
    assert [(c.start, c.end) for c in chunks[:2]] == [(0, 5), (4, 7)]


def test_recursive_character_level_overlap() -> None:
    spec = {"kind": "recursive", "size": 4, "overlap": 1}
    assert texts(spec, "abcdefghij") == ["abcd", "defg", "ghij"]


def test_recursive_splits_long_pieces_with_the_next_separators() -> None:
    spec = {"kind": "recursive", "size": 10}
    chunks = run(spec, "para one is here\n\nshort")
    assert [(c.text, c.start, c.end) for c in chunks] == [
        ("para one", 0, 8),
        ("is here", 9, 16),
        ("short", 18, 23),
    ]


def test_recursive_keeps_unsplittable_pieces_whole() -> None:
    # LangChain emits " enormousword" untrimmed here; chunks are always trimmed.
    spec = {"kind": "recursive", "size": 6, "separators": [" "]}
    assert texts(spec, "tiny enormousword end") == ["tiny", "enormousword", "end"]


def test_recursive_regex_separators() -> None:
    spec = {"kind": "recursive", "size": 15, "separators": [r"\n+", r"\s+", ""]}
    text = "first line\n\n\nsecond line"
    assert texts({**spec, "is_separator_regex": True}, text) == ["first line", "second line"]
    # "\n\n\nsecond line" (14 chars) is not shorter than 12: split again at "\s+".
    assert texts({**spec, "size": 12, "is_separator_regex": True}, text) == [
        "first line",
        "second",
        "line",
    ]
    # As literals, neither separator occurs: character level.
    assert texts({**spec, "size": 12}, text)[0] == "first line"


def test_recursive_tokens_cl100k_chroma_separators() -> None:
    spec = {
        "kind": "recursive",
        "size": 3,
        "overlap": 1,
        "unit": "tokens",
        "tokenizer": "cl100k",
        "separators": CHROMA_SEPARATORS,
    }
    # Pieces " dog" + "." count separately (". " is not a separator here): lengths are sums.
    assert texts(spec, "The quick brown fox jumps over the lazy dog.") == [
        "The quick brown",
        "brown fox jumps",
        "jumps over the",
        "the lazy dog",
        ".",
    ]


def test_recursive_tokens_default_tokenizer() -> None:
    spec = {"kind": "recursive", "size": 3, "overlap": 1, "unit": "tokens"}
    assert texts(spec, "The quick brown fox jumps over the lazy dog.") == [
        "The quick brown",
        "brown fox jumps",
        "jumps over the",
        "the lazy",
        "lazy dog.",
    ]


# --- sentence -----------------------------------------------------------------------------

FOUR = "One two. Three four five. Six. Seven eight nine ten."


def test_sentence_packs_whole_sentences() -> None:
    chunks = run({"kind": "sentence", "size": 30}, FOUR)
    assert [(c.text, c.start, c.end) for c in chunks] == [
        ("One two. Three four five. Six.", 0, 30),
        ("Seven eight nine ten.", 31, 52),
    ]


def test_sentence_overlap_carries_trailing_sentences() -> None:
    assert texts({"kind": "sentence", "size": 30, "overlap": 10}, FOUR) == [
        "One two. Three four five. Six.",
        "Six. Seven eight nine ten.",
    ]
    # 21 chars of "Three four five. Six." fit an overlap of 21, but then the next
    # sentence would not fit: only "Six." is carried.
    assert texts({"kind": "sentence", "size": 30, "overlap": 21}, FOUR)[1] == (
        "Six. Seven eight nine ten."
    )


def test_sentence_cuts_overlong_sentences_recursively() -> None:
    text = "Tiny. Alpha beta gamma delta. End."
    assert texts({"kind": "sentence", "size": 12}, text) == [
        "Tiny.",
        "Alpha beta",
        "gamma",
        "delta.",
        "End.",
    ]


def test_sentence_words() -> None:
    spec = {"kind": "sentence", "size": 4, "unit": "words"}
    assert texts(spec, "One two. Three four five. Six.") == ["One two.", "Three four five. Six."]


def test_sentence_tokens() -> None:
    text = "The cat sat. The dog ran off. Birds sing."
    spec = {"kind": "sentence", "size": 6, "unit": "tokens", "tokenizer": "cl100k"}
    assert texts(spec, text) == ["The cat sat.", "The dog ran off.", "Birds sing."]
    assert texts({**spec, "size": 20}, text) == [text]


# --- sentence_window ----------------------------------------------------------------------


def test_sentence_window_offsets() -> None:
    text = "Red fox. Blue bird.\n\nGreen frog. Gray wolf."
    chunks = run({"kind": "sentence_window", "window": 1}, text, source="zoo")
    assert [c.text for c in chunks] == ["Red fox.", "Blue bird.", "Green frog.", "Gray wolf."]
    windows = [c.metadata["window"] for c in chunks]
    assert windows == [
        "Red fox. Blue bird.",
        "Red fox. Blue bird.\n\nGreen frog.",
        "Blue bird.\n\nGreen frog. Gray wolf.",
        "Green frog. Gray wolf.",
    ]
    for c in chunks:
        start, end = c.metadata["window_start"], c.metadata["window_end"]
        assert text[start:end] == c.metadata["window"]
        assert start <= c.start < c.end <= end
        assert c.metadata["source"] == "zoo"


def test_sentence_window_zero_is_the_sentence() -> None:
    chunks = run({"kind": "sentence_window", "window": 0}, "Red fox. Blue bird.")
    assert [c.metadata["window"] for c in chunks] == ["Red fox.", "Blue bird."]


# --- semantic -----------------------------------------------------------------------------

PETS = [
    "Cats purr when cats feel calm.",
    "Calm cats purr and nap.",
    "Cats nap where cats feel warm.",
    "Warm cats nap and purr.",
    "Cats purr, nap and feel calm.",
]
MARKETS = [
    "Stock markets fell as bond yields rose.",
    "Bond yields rose and stock markets fell.",
    "Stock prices fell while bond markets rose.",
    "Markets saw stock prices and bond yields fall.",
    "Bond and stock markets rose again.",
]
TOPICS = " ".join(PETS + MARKETS)


def test_semantic_splits_at_the_topic_change_with_hashing() -> None:
    spec = {"kind": "semantic", "buffer": 0, "embedder": HASHING}
    assert texts(spec, TOPICS) == [" ".join(PETS), " ".join(MARKETS)]


def test_semantic_buffer_moves_the_split_at_most_buffer_sentences() -> None:
    # As in LlamaIndex: group i spans sentences i-1..i+1, so the distance already jumps when
    # the first sentence of the new topic enters a group, one sentence before the change.
    spec = {"kind": "semantic", "buffer": 1, "embedder": HASHING}
    first, second = texts(spec, TOPICS)
    assert first in {" ".join(PETS[:4]), " ".join(PETS)}
    assert f"{first} {second}" == TOPICS


def test_semantic_percentile_zero_splits_everywhere_but_the_closest() -> None:
    spec = {"kind": "semantic", "buffer": 0, "percentile": 0, "embedder": HASHING}
    chunks = run(spec, TOPICS)
    assert 1 < len(chunks) <= len(PETS + MARKETS)


def test_semantic_short_documents_are_one_chunk() -> None:
    spec = {"kind": "semantic", "embedder": HASHING}
    assert texts(spec, "Only one sentence.") == ["Only one sentence."]
    assert texts(spec, "Cats purr. Stocks fell.") == ["Cats purr. Stocks fell."]


class CountingEmbedder:
    """Wraps an embedder and records each call's batch."""

    def __init__(self) -> None:
        self.inner = components("embedder").build(HASHING)
        self.calls: list[int] = []

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def identity(self) -> str:
        return self.inner.identity

    def embed(self, texts: Sequence[str], role: Role = "document") -> np.ndarray:
        assert role == "document"
        self.calls.append(len(texts))
        return self.inner.embed(texts, role)


def test_semantic_chunk_many_embeds_in_one_batch() -> None:
    embedder = CountingEmbedder()
    chunker = SemanticChunker(SemanticConfig(embedder=HASHING, buffer=1), embedder)
    docs = [
        Document(id="a", text=TOPICS),
        Document(id="b", text="Too short."),
        Document(id="c", text=" ".join(MARKETS + PETS)),
    ]
    chunks = chunk_documents(chunker, docs)
    assert embedder.calls == [20]  # the groups of a and c; b needs no embedding
    for doc in docs:
        check(doc, [c for c in chunks if c.doc_id == doc.id])
    one_by_one = [c for doc in docs for c in chunker.chunk(doc)]
    assert chunks == one_by_one


def test_semantic_groups_use_the_buffer() -> None:
    embedder = CountingEmbedder()
    seen: list[str] = []
    inner_embed = embedder.embed

    def spy(texts: Sequence[str], role: Role = "document") -> np.ndarray:
        seen.extend(texts)
        return inner_embed(texts, role)

    embedder.embed = spy  # type: ignore[method-assign]
    chunker = SemanticChunker(SemanticConfig(embedder=HASHING, buffer=1), embedder)
    chunker.chunk(Document(id="d", text="A one. B two.\nC three. D four."))
    assert seen == [
        "A one. B two.",
        "A one. B two.\nC three.",
        "B two.\nC three. D four.",
        "C three. D four.",
    ]


def test_semantic_default_embedder_is_minilm() -> None:
    config = components("chunker").parse({"kind": "semantic"})
    assert config.embedder.kind == "sentence-transformers"
    assert config.embedder.model == "all-MiniLM-L6-v2"
    assert config.label() == "semantic"


@pytest.mark.slow
def test_semantic_with_minilm_finds_the_topic_change() -> None:
    text = " ".join(
        [
            "The chef chopped onions and garlic for the tomato sauce.",
            "She simmered the tomato sauce slowly with fresh basil.",
            "The pasta boiled in salted water for ten minutes.",
            "Grated parmesan cheese was sprinkled over the pasta.",
            "Dinner was served with warm bread and olive oil.",
            "The rocket engines ignited on the launch pad.",
            "The rocket climbed quickly into orbit around Earth.",
            "Astronauts docked the spacecraft with the space station.",
            "Mission control tracked the astronauts in orbit.",
            "The astronauts flew the spacecraft back to Earth.",
        ]
    )
    first, second = texts({"kind": "semantic", "buffer": 0}, text)
    assert first.endswith("warm bread and olive oil.")
    assert second.startswith("The rocket engines ignited")


# --- config validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"kind": "recursive", "size": 512, "overlap": 600},
            "chunker.overlap: must be < size (got 600 >= 512)",
        ),
        (
            {"kind": "fixed", "size": 4, "overlap": 4},
            "chunker.overlap: must be < size (got 4 >= 4)",
        ),
        (
            {"kind": "fixed", "size": 5, "unit": "bytes"},
            "chunker.unit: Input should be 'chars', 'tokens' or 'words'",
        ),
        ({"kind": "sentence", "size": 0}, "chunker.size: Input should be greater than 0"),
        (
            {"kind": "fixed", "size": 5, "overlap": -1},
            "chunker.overlap: Input should be greater than or equal to 0",
        ),
        ({"kind": "recursive"}, "chunker.size: Field required"),
        ({"kind": "fixed", "size": 5, "sise": 5}, "chunker.sise: unknown key"),
        (
            {"kind": "fixed", "size": 5, "tokenizer": "cl100k"},
            "chunker.tokenizer: only used with unit 'tokens'",
        ),
        (
            {"kind": "recursive", "size": 5, "keep_separator": True},
            "chunker.keep_separator: Input should be 'start' or 'end'",
        ),
        ({"kind": "recursive", "size": 5, "separators": []}, "chunker.separators"),
        (
            {"kind": "recursive", "size": 5, "is_separator_regex": True, "separators": ["("]},
            "chunker.separators: not a valid regular expression '('",
        ),
        ({"kind": "sentence_window", "window": -1}, "chunker.window"),
        (
            {"kind": "semantic", "percentile": 150},
            "chunker.percentile: Input should be less than or equal to 100",
        ),
        ({"kind": "semantic", "buffer": -1}, "chunker.buffer"),
        (
            {"kind": "semantic", "embedder": {"kind": "nope"}},
            "chunker.embedder.kind: unknown embedder kind 'nope'",
        ),
        ({"kind": "nope"}, "allowed: fixed, none, recursive, semantic, sentence, sentence_window"),
    ],
)
def test_config_errors_name_the_key(spec: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        components("chunker").parse(spec)
    assert expected in str(info.value)


def test_tokens_unit_accepts_a_tokenizer() -> None:
    config = components("chunker").parse(
        {"kind": "fixed", "size": 5, "unit": "tokens", "tokenizer": "cl100k"}
    )
    assert config.tokenizer == "cl100k"
    assert (
        components("chunker").parse({"kind": "fixed", "size": 5, "unit": "tokens"}).tokenizer
        is None
    )


# --- the chunking-evaluation corpora ------------------------------------------------------

CORPUS_SPECS = [
    {"kind": "none"},
    {"kind": "fixed", "size": 400, "overlap": 200},
    {"kind": "fixed", "size": 200, "overlap": 50, "unit": "tokens", "tokenizer": "cl100k"},
    {"kind": "fixed", "size": 100, "overlap": 10, "unit": "words"},
    {"kind": "recursive", "size": 400, "overlap": 200},
    {
        "kind": "recursive",
        "size": 200,
        "unit": "tokens",
        "tokenizer": "cl100k",
        "separators": CHROMA_SEPARATORS,
    },
    {"kind": "sentence", "size": 500, "overlap": 100},
    {"kind": "sentence_window", "window": 2},
    {"kind": "semantic", "embedder": HASHING},
]


@cache
def corpus(name: str) -> tuple[Document, np.ndarray]:
    text = (CORPORA / name).read_text(encoding="utf-8")
    visible = np.fromiter((not ch.isspace() for ch in text), dtype=bool, count=len(text))
    return Document(id=name, text=text), visible


@pytest.mark.parametrize(
    "spec", CORPUS_SPECS, ids=lambda s: s["kind"] + "-" + s.get("unit", "chars")
)
def test_corpora_offsets_and_coverage(spec: dict) -> None:
    if not CORPORA.is_dir():
        pytest.skip(f"{CORPORA} not present")
    names = sorted(p.name for p in CORPORA.glob("*.md"))
    assert len(names) == 5
    docs = [corpus(name)[0] for name in names]
    chunks = chunk_documents(build_chunker(spec), docs)
    for name, doc in zip(names, docs, strict=True):
        own = [c for c in chunks if c.doc_id == doc.id]
        check(doc, own)
        covered = np.zeros(len(doc.text), dtype=bool)
        for c in own:
            covered[c.start : c.end] = True
        assert not (corpus(name)[1] & ~covered).any(), f"{name}: non-whitespace text not covered"
