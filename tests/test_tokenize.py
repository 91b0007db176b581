"""Word tokenizer options and token counters (chars, words, HF tokenizer, cl100k)."""

import pytest

from ragbench.errors import ConfigError
from ragbench.registry import format_validation_error
from ragbench.text.tokenize import TokenizerConfig, Vocabulary, WordTokenizer, token_counter

TEXT = "The Running dogs are RUNNING into the retrieval-augmented Generation of 2024"


def test_default_tokenizer_lowercases_removes_stopwords_and_stems() -> None:
    terms = WordTokenizer().tokenize(TEXT)
    assert terms == ["run", "dog", "run", "retriev", "augment", "generat", "2024"]


def test_options_change_the_terms() -> None:
    plain = WordTokenizer(TokenizerConfig(stopwords="none", stemmer=None, lowercase=False))
    assert plain.tokenize("The Dogs of war") == ["The", "Dogs", "of", "war"]
    custom = WordTokenizer(TokenizerConfig(stopwords=("dogs",), stemmer=None))
    assert custom.tokenize("The Dogs of war") == ["the", "of", "war"]
    longer = WordTokenizer(TokenizerConfig(min_length=3, stemmer=None))
    assert longer.tokenize("an ox ate hay") == ["ate", "hay"]


def test_config_keys_differ_by_option_and_bad_options_are_named() -> None:
    assert TokenizerConfig().key() != TokenizerConfig(stemmer=None).key()
    assert TokenizerConfig().key() == TokenizerConfig(stemmer="english").key()
    with pytest.raises(Exception) as err:
        TokenizerConfig(stemmer="klingon")
    assert "unknown stemmer 'klingon'" in str(err.value)
    try:
        TokenizerConfig(pattern="(")
    except Exception as exc:  # pydantic ValidationError
        message = format_validation_error("tokenizer", exc)  # type: ignore[arg-type]
        assert message.startswith("tokenizer.pattern: not a valid regular expression")
    else:
        raise AssertionError("an invalid regex must be rejected")
    assert ConfigError  # the registry turns these into ConfigError for configs


@pytest.mark.parametrize(
    ("unit", "tokenizer"),
    [("chars", None), ("words", None), ("tokens", None), ("tokens", "cl100k")],
)
def test_counter_spans_are_exact_offsets(unit: str, tokenizer: str | None) -> None:
    text = "Héllo wörld, this is ragbench — a test.\n\nNew para 日本語 🙂 end"
    counter = token_counter(unit, tokenizer)  # type: ignore[arg-type]
    spans = counter.spans(text)
    assert len(spans) > 0
    assert all(0 <= a < b <= len(text) for a, b in spans)
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))
    # every non-space character is inside some unit
    covered = set()
    for a, b in spans:
        covered.update(range(a, b))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())
    assert counter.count(text) >= len(spans) - 1


def test_counts_match_the_reference_tokenizers() -> None:
    import bpe_openai

    text = "Retrieval-augmented generation, measured in cl100k tokens."
    expected = len(bpe_openai.get_encoding("cl100k_base").encode_ordinary(text))
    assert token_counter("tokens", "cl100k").count(text) == expected
    assert token_counter("words").count("a  b\nc") == 3
    assert token_counter("chars").count("abc") == 3
    # MiniLM's WordPiece splits a rare word into several pieces
    assert token_counter("tokens").count("ragbench") > 1
    with pytest.raises(ValueError, match="unknown unit"):
        token_counter("bytes")  # type: ignore[arg-type]


def test_a_corpus_tokenized_again_gives_the_same_terms_per_tokenizer() -> None:
    corpus = [f"Running dogs {i} and the cats were jumping" for i in range(300)]
    stemmed, plain = WordTokenizer(), WordTokenizer(TokenizerConfig(stemmer=None))
    vocab = Vocabulary()
    first = stemmed.tokenize_corpus(corpus, vocab)
    assert [vocab.decode(ids) for ids in first] == [stemmed.tokenize(t) for t in corpus]
    assert vocab.decode(first[0]) == ["run", "dog", "0", "cat", "were", "jump"]
    words = Vocabulary()
    assert words.decode(plain.tokenize_corpus(corpus, words)[0]) == [
        *("running", "dogs", "0", "cats", "were", "jumping")
    ]
    again_vocab = Vocabulary()
    again = WordTokenizer().tokenize_corpus(list(corpus), again_vocab)
    assert again == first and again is not first and again_vocab.terms == vocab.terms
    assert again[0] is first[0]  # not tokenized again
    changed = [*corpus[:-1], "Flying birds"]
    fresh = Vocabulary()
    assert fresh.decode(WordTokenizer().tokenize_corpus(changed, fresh)[-1]) == ["fli", "bird"]


def test_tokenize_corpus_numbers_new_terms_and_stems_each_word_once() -> None:
    tokenizer, vocab = WordTokenizer(), Vocabulary()
    first = tokenizer.tokenize_corpus(["Dogs run", "the dog RUNS"], vocab)
    assert vocab.terms == ["dog", "run"] and first == [[0, 1], [0, 1]]
    assert vocab.words == {"dogs": 0, "run": 1, "the": -1, "dog": 0, "runs": 1}
    more = tokenizer.tokenize_corpus(["running cats", "a dog"], vocab)  # a vocabulary in use
    assert more == [[1, 2], [0]] and vocab.terms == ["dog", "run", "cat"]
    assert [tokenizer.tokenize(t) for t in ["running cats", "a dog"]] == [
        vocab.decode(ids) for ids in more
    ]
    kept = vocab.keep([0, 2])  # "run" is in no text any more
    assert kept == {0: 0, 2: 1} and vocab.terms == ["dog", "cat"] and vocab.ids["cat"] == 1
    assert "running" not in vocab.words and vocab.words["cats"] == 1
    assert tokenizer.tokenize_corpus(["runs"], vocab) == [[2]] and vocab.terms[2] == "run"
