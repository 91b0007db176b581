"""Word tokenization for BM25 and size measurement (chars, words, model tokens) for chunkers.

``WordTokenizer`` is configured by a frozen ``TokenizerConfig`` (lowercase, regex, stopwords,
Snowball stemming via PyStemmer) whose ``key()`` enters cache keys. It turns a text into terms,
or a corpus straight into term ids over a ``Vocabulary`` that also remembers each distinct word's
term, so a corpus stems every distinct word once, however often it occurs (what BM25 indexes).
``token_counter`` returns a ``TokenCounter`` for a chunk-size unit: characters, whitespace words,
any Hugging Face tokenizer (default: the embedding model's), or OpenAI's cl100k (bundled offline
by ``bpe-openai``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from functools import cache, cached_property
from typing import Literal

import numpy as np
from pydantic import field_validator

from ragbench.errors import ConfigError
from ragbench.models import DEFAULT_MODEL, model_problem, resolve_model
from ragbench.protocols import TokenCounter
from ragbench.registry import ConfigModel
from ragbench.text.patterns import safe_pattern

__all__ = [
    "ENGLISH_STOPWORDS",
    "TokenizerConfig",
    "Vocabulary",
    "WordTokenizer",
    "token_counter",
]

# Lucene's / Anserini's English stop set (the list bm25s ships as STOPWORDS_EN).
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)

Unit = Literal["chars", "tokens", "words"]

# Corpora tokenized recently into an empty vocabulary, per tokenizer: the texts, the terms they
# numbered and their term ids. A sweep builds one BM25 index per (k1, b) over the same chunks,
# and tokenizing is a large part of each build.
_RECENT_CORPORA = 4
_Recent = tuple[tuple[str, ...], tuple[str, ...], list[list[int]]]
_recent: OrderedDict[tuple[str, int], _Recent] = OrderedDict()
_recent_lock = threading.Lock()


class TokenizerConfig(ConfigModel):
    """How text becomes BM25 terms. All options are part of the cache key."""

    lowercase: bool = True
    pattern: str = r"\w+"
    stopwords: Literal["english", "none"] | tuple[str, ...] = "english"
    stemmer: str | None = "english"
    min_length: int = 1

    @field_validator("pattern")
    @classmethod
    def _valid_regex(cls, value: str) -> str:
        safe_pattern(value)
        return value

    @field_validator("stemmer")
    @classmethod
    def _known_stemmer(cls, value: str | None) -> str | None:
        if value is None or value == "none":
            return None
        import Stemmer

        if value not in Stemmer.algorithms():
            allowed = ", ".join(Stemmer.algorithms())
            raise ValueError(f"unknown stemmer {value!r}; allowed: none, {allowed}")
        return value

    def key(self) -> str:
        """Stable hash of the options."""
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


class Vocabulary:
    """Terms numbered from 0 in order of first appearance, and the term id of every word seen by
    the one tokenizer that fills it (-1 for a word it drops: a stopword, a word too short)."""

    def __init__(self, terms: Iterable[str] = ()) -> None:
        self.terms: list[str] = list(terms)
        self.ids: dict[str, int] = {t: i for i, t in enumerate(self.terms)}
        self.words: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.terms)

    def add(self, term: str) -> int:
        """The id of ``term``, numbered next if it is new."""
        found = self.ids.get(term)
        if found is None:
            found = self.ids[term] = len(self.terms)
            self.terms.append(term)
        return found

    def decode(self, ids: Iterable[int]) -> list[str]:
        """The terms of ``ids``."""
        terms = self.terms
        return [terms[i] for i in ids]

    def keep(self, kept: Sequence[int]) -> dict[int, int]:
        """Keep only the terms ``kept`` (ids, ascending), numbered again in that order; returns
        each kept term's old id → new id. Words of dropped terms are forgotten."""
        self.terms = [self.terms[i] for i in kept]
        self.ids = {t: i for i, t in enumerate(self.terms)}
        new = dict(zip(kept, self.ids.values(), strict=True))
        self.words = {w: new[i] for w, i in self.words.items() if i in new}
        return new


class WordTokenizer:
    """Lowercase → regex split → stopword removal → stemming, as configured."""

    def __init__(self, config: TokenizerConfig | None = None) -> None:
        self.config = config or TokenizerConfig()
        self._key = self.config.key()
        self._regex = re.compile(self.config.pattern)
        stop = self.config.stopwords
        if stop == "english":
            self._stop: frozenset[str] = ENGLISH_STOPWORDS
        elif stop == "none":
            self._stop = frozenset()
        else:
            self._stop = frozenset(w.lower() if self.config.lowercase else w for w in stop)
        self._stem = None
        if self.config.stemmer:
            import Stemmer

            self._stem = Stemmer.Stemmer(self.config.stemmer).stemWords

    def tokenize(self, text: str) -> list[str]:
        """Terms of one text."""
        if self.config.lowercase:
            text = text.lower()
        words = self._regex.findall(text)
        min_len = self.config.min_length
        if self._stop or min_len > 1:
            words = [w for w in words if w not in self._stop and len(w) >= min_len]
        return self._stem(words) if self._stem else words

    def tokenize_many(self, texts: Iterable[str]) -> list[list[str]]:
        """Terms of many texts."""
        return [self.tokenize(t) for t in texts]

    def tokenize_corpus(self, texts: Iterable[str], vocab: Vocabulary) -> list[list[int]]:
        """The term ids of the texts of a corpus to index, over ``vocab``, which numbers their new
        terms. A corpus tokenized by an equal tokenizer into an empty vocabulary, among the last
        few, is not tokenized again: ``vocab`` gets its terms and the id lists are shared
        (callers must not mutate them)."""
        batch = tuple(texts)
        if len(vocab):
            return [self._term_ids(text, vocab) for text in batch]
        slot = (self._key, hash(batch))
        with _recent_lock:
            found = _recent.get(slot)
            if found is not None and found[0] == batch:
                _recent.move_to_end(slot)
                for term in found[1]:
                    vocab.add(term)
                return list(found[2])
        ids = [self._term_ids(text, vocab) for text in batch]
        with _recent_lock:
            _recent[slot] = (batch, tuple(vocab.terms), ids)
            while len(_recent) > _RECENT_CORPORA:
                _recent.popitem(last=False)
        return list(ids)

    def _term_ids(self, text: str, vocab: Vocabulary) -> list[int]:
        """The term ids of one text; its words ``vocab`` has not seen are learnt first."""
        if self.config.lowercase:
            text = text.lower()
        words = self._regex.findall(text)
        known = vocab.words
        try:
            found = [known[w] for w in words]
        except KeyError:
            self._learn(words, vocab)
            found = [known[w] for w in words]
        return [i for i in found if i >= 0]

    def _learn(self, words: list[str], vocab: Vocabulary) -> None:
        """Enter the words of ``words`` that ``vocab`` has not seen, in order: -1 for a word
        dropped, else the id of its term (the stems of the new words, in one call)."""
        new = [w for w in dict.fromkeys(words) if w not in vocab.words]
        min_len = self.config.min_length
        kept = [w for w in new if w not in self._stop and len(w) >= min_len]
        vocab.words.update(dict.fromkeys(new, -1))
        terms = self._stem(kept) if self._stem else kept
        for word, term in zip(kept, terms, strict=True):
            vocab.words[word] = vocab.add(term)


class _CharCounter:
    name = "chars"

    def count(self, text: str) -> int:
        return len(text)

    def spans(self, text: str) -> np.ndarray:
        starts = np.arange(len(text), dtype=np.int64)
        return np.stack([starts, starts + 1], axis=1)


class _WordCounter:
    name = "words"
    _regex = re.compile(r"\S+")

    def count(self, text: str) -> int:
        return len(self._regex.findall(text))

    def spans(self, text: str) -> np.ndarray:
        out = [(m.start(), m.end()) for m in self._regex.finditer(text)]
        return np.asarray(out, dtype=np.int64).reshape(-1, 2)


class _Cl100kCounter:
    name = "cl100k"

    @cached_property
    def _encoding(self):
        import bpe_openai

        return bpe_openai.get_encoding("cl100k_base")

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))

    def spans(self, text: str) -> np.ndarray:
        ids = self._encoding.encode_ordinary(text)
        if not ids:
            return np.zeros((0, 2), dtype=np.int64)
        _, starts = self._encoding.decode_with_offsets(ids)
        return _spans_from_starts(starts, len(text))


def _spans_from_starts(starts: Sequence[int] | np.ndarray, length: int) -> np.ndarray:
    """Spans from token start offsets. A token inside a multi-byte character shares its start;
    only tokens that begin a new character are kept, so every span is a non-empty char range."""
    arr = np.asarray(starts, dtype=np.int64)
    arr = np.clip(arr, 0, length)
    keep = np.concatenate([[True], arr[1:] > arr[:-1]]) & (arr < length)
    arr = arr[keep]
    ends = np.append(arr[1:], length)
    return np.stack([arr, ends], axis=1)


class _HFCounter:
    def __init__(self, name: str) -> None:
        self.name = name

    @cached_property
    def _tokenizer(self):
        """The Hugging Face tokenizer (loaded on first use; a missing one is a ``ConfigError``
        naming it, found before transformers would retry an unreachable hub)."""
        problem = model_problem(self.name)
        if problem is not None:
            raise ConfigError(f"tokenizer: no such tokenizer {self.name!r} ({problem})")
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(resolve_model(self.name), use_fast=True)
        except (OSError, ValueError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"tokenizer: cannot load {self.name!r} ({reason})") from None
        tok.model_max_length = 1 << 62  # measuring, not truncating: silence length warnings
        return tok

    def count(self, text: str) -> int:
        return len(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def spans(self, text: str) -> np.ndarray:
        enc = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        if len(offsets) == 0:
            return offsets
        # Tokenizers that drop whitespace leave gaps; a span runs to the next token's start so
        # that consecutive token windows cover the text between them.
        starts = offsets[:, 0]
        return _spans_from_starts(starts, len(text)) if len(starts) else offsets


@cache
def token_counter(unit: Unit = "chars", tokenizer: str | None = None) -> TokenCounter:
    """The ``TokenCounter`` measuring ``unit``; ``tokenizer`` names the model for ``tokens``.

    ``tokenizer`` may be ``cl100k`` (or ``cl100k_base``), a Hugging Face hub id or local path;
    it defaults to the default embedding model's tokenizer.
    """
    if unit == "chars":
        return _CharCounter()
    if unit == "words":
        return _WordCounter()
    if unit != "tokens":
        raise ValueError(f"unknown unit {unit!r}; allowed: chars, tokens, words")
    name = tokenizer or DEFAULT_MODEL
    if name in {"cl100k", "cl100k_base"}:
        return _Cl100kCounter()
    return _HFCounter(name)
