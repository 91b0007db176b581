"""Sentence splitting: where sentences end, and exact offsets."""

from __future__ import annotations

import itertools

import pytest

from ragbench.text.sentences import split_sentences


def sentences(text: str) -> list[str]:
    spans = split_sentences(text)
    for start, end in spans:
        piece = text[start:end]
        assert piece and piece == piece.strip()
    return [text[a:b] for a, b in spans]


def test_basic_terminators() -> None:
    assert sentences("It rains. Does it? Yes! Good.") == ["It rains.", "Does it?", "Yes!", "Good."]


def test_runs_of_punctuation() -> None:
    assert sentences("Wait... What?! Really.") == ["Wait...", "What?!", "Really."]


def test_no_break_before_lowercase() -> None:
    assert sentences("Wait... what happened? he asked.") == ["Wait... what happened? he asked."]


def test_break_before_digit_and_quote() -> None:
    assert sentences('Done. 42 people came. "Great," she said.') == [
        "Done.",
        "42 people came.",
        '"Great," she said.',
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Mr. Smith met Dr. Jones and Prof. Brown.",
        "Mrs. Lee lives on Main St. Paul visits her.",
        "Cats vs. Dogs is a film.",
        "Fruit, etc. Are all fine.",
        "Use a tool, e.g. A hammer.",
        "Use a tool, i.e. A hammer.",
        "Acme Inc. And Widgets Ltd. Merged.",
        "See Fig. 3 for details.",
        "It is No. 5 in the list.",
        "The U.S. Army is large.",
        "J. Smith and J. R. R. Tolkien wrote.",
    ],
)
def test_abbreviations_and_initials_do_not_end_sentences(text: str) -> None:
    assert sentences(text) == [text]


def test_no_is_a_word_before_a_capital() -> None:
    assert sentences("He said no. Then he left.") == ["He said no.", "Then he left."]


@pytest.mark.parametrize(
    "text",
    [
        "Pi is 3.14 and e is 2.718 today.",
        "Upgrade from v2.0.1 to v2.1.0 now.",
        "Visit https://example.com/a.b?c=d!e for more.",
        "Mail me at first.last@example.org please.",
    ],
)
def test_decimals_versions_and_urls_stay_whole(text: str) -> None:
    assert sentences(text) == [text]


def test_sentence_after_url_or_number() -> None:
    assert sentences("See https://example.com. It costs 3.50. Cheap!") == [
        "See https://example.com.",
        "It costs 3.50.",
        "Cheap!",
    ]


def test_closing_quotes_and_brackets_stay_with_the_sentence() -> None:
    assert sentences('He said "Stop!" Then he left. (It was late.) Next day.') == [
        'He said "Stop!"',
        "Then he left.",
        "(It was late.)",
        "Next day.",
    ]
    assert sentences("She said “Go.” He went.") == ["She said “Go.”", "He went."]


def test_blank_lines_always_break() -> None:
    text = "First paragraph without a stop\n\nsecond one\n \t\nthird"
    assert sentences(text) == ["First paragraph without a stop", "second one", "third"]


def test_single_newline_does_not_break() -> None:
    assert sentences("a line wrapped\nin the middle.") == ["a line wrapped\nin the middle."]


def test_markdown_headings_are_their_own_sentences() -> None:
    text = "# Title\nSome text here. More text.\n## Sub heading\nbody"
    assert sentences(text) == ["# Title", "Some text here.", "More text.", "## Sub heading", "body"]


def test_hashtag_is_not_a_heading() -> None:
    assert sentences("we like\n#hashtags here") == ["we like\n#hashtags here"]


def test_list_items_break() -> None:
    text = "Shopping:\n- milk\n- eggs and\n  bread\n* tea\n1. first\n2) second"
    assert sentences(text) == [
        "Shopping:",
        "- milk",
        "- eggs and\n  bread",
        "* tea",
        "1. first",
        "2) second",
    ]


def test_numbered_item_marker_is_not_a_sentence() -> None:
    assert sentences("1. First step.\n2. Second step.") == ["1. First step.", "2. Second step."]


def test_table_rows_are_whole_lines() -> None:
    text = "Results:\n| a | b |\n|---|---|\n| 1 | 2 |\nAfter the table."
    assert sentences(text) == [
        "Results:",
        "| a | b |",
        "|---|---|",
        "| 1 | 2 |",
        "After the table.",
    ]


def test_unicode_text() -> None:
    assert sentences("Ça va? Élan vital. Ñandú corre.") == ["Ça va?", "Élan vital.", "Ñandú corre."]
    assert sentences("Привет. Как дела?") == ["Привет.", "Как дела?"]
    assert sentences("こんにちは。元気ですか？はい。") == ["こんにちは。", "元気ですか？", "はい。"]
    # Uncased scripts start sentences too.
    assert sentences("The end. 他来了。") == ["The end.", "他来了。"]


def test_exact_offsets_with_surrounding_whitespace() -> None:
    text = "  \n First one.   Second one.\n\n\n  Third  "
    spans = split_sentences(text)
    assert [text[a:b] for a, b in spans] == ["First one.", "Second one.", "Third"]
    assert spans[0] == (4, 14)


@pytest.mark.parametrize("text", ["", " ", "\n\n\t ", "\u2029"])
def test_empty_and_blank_input(text: str) -> None:
    assert split_sentences(text) == []


@pytest.mark.parametrize(
    "text", ["\x00.\x00", "?!.…", ". . .", "\ud800 x. Y", "a\u2029b", "\r\n\r\nA.\r\nB."]
)
def test_odd_input_is_covered(text: str) -> None:
    spans = split_sentences(text)
    covered = {i for a, b in spans for i in range(a, b)}
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())
    assert all(a < b <= c for (a, b), (c, _) in itertools.pairwise(spans))
