"""What the model says when asked for a title becomes a title, or nothing (the conversation then
keeps its first line): never a preamble, a quote, a sentence cut off, or words about the title.

The 30 answers in data/titles_recorded.json are the default model's own, recorded once by
data/record_titles.py for varied first exchanges.
"""

import json
import re
from pathlib import Path

import pytest

from chatapp.upstream import titles

RECORDED = json.loads((Path(__file__).parent / "data" / "titles_recorded.json").read_text())
ABOUT_THE_TITLE = re.compile(r"\b(?:titles?|conversations?)\b", re.IGNORECASE)
PREAMBLE = re.compile(r"^(?:here|sure|certainly|title)\b", re.IGNORECASE)
QUOTES_AND_STOPS = "\"'“”‘’`*.:;,!?"


def is_a_clean_title(title: str) -> bool:
    return (1 <= len(title.split()) <= titles.MAX_WORDS and "\n" not in title
            and title[0] not in QUOTES_AND_STOPS and title[-1] not in QUOTES_AND_STOPS
            and not PREAMBLE.match(title) and not ABOUT_THE_TITLE.search(title))


def test_the_recorded_answers_are_thirty_varied_exchanges():
    assert len(RECORDED) == 30
    assert len({record["question"] for record in RECORDED}) == 30


def test_at_least_27_of_the_30_recorded_answers_give_a_clean_title_or_the_first_line():
    results = [titles.cleaned(record["said"]) for record in RECORDED]

    clean = [title for title in results if title is None or is_a_clean_title(title)]

    assert len(clean) >= 27, [title for title in results if title not in clean]


def test_no_recorded_answer_gives_a_sentence_about_the_title():
    about = [title for title in map(titles.cleaned, (record["said"] for record in RECORDED))
             if title is not None and ABOUT_THE_TITLE.search(title)]

    assert about == []


@pytest.mark.parametrize("said, title", [
    ("Quick Soup Recipes", "Quick Soup Recipes"),
    ('"Quick Soup Recipes."', "Quick Soup Recipes"),
    ("Title: Quick   Soup Recipes\nThis conversation is about soup.", "Quick Soup Recipes"),
    ("**Quick Soup Recipes**", "Quick Soup Recipes"),
    ('Sure! Here is a title: "Quick Soup Recipes"', "Quick Soup Recipes"),
    ('Here\'s a possible title for the conversation:\n\n"Python: Reversing Lists"', "Python: Reversing Lists"),
    ("Title: Quick Soup Recipes.", "Quick Soup Recipes"),
    ("“Quick Soup Recipes!”", "Quick Soup Recipes"),
    ('The answer to the question "Which Soup Is Quickest?" is', "Which Soup Is Quickest"),
    ("The Other End of the Universe (1958", "The Other End of the Universe"),
])
def test_a_preamble_goes_and_a_quoted_title_is_taken(said, title):
    assert titles.cleaned(said) == title


@pytest.mark.parametrize("said", [
    "", "  \n ", '"..."', " ".join(["soup"] * 11), "x" * 81,
    "Here is a possible title for the conversation",
    'Here\'s a possible title for the conversation:\n\n"Python: Reverse a',
    "The user's response is a perfect example of how to use a title to convey",
    "Sure, I can help with that.",
    "Ciao, ami. I'm glad you're planning this adventure! Let",
    "The Chicken and Rice recipe with a side of",
    "Uncategorized",
])
def test_an_answer_about_the_title_or_cut_off_or_two_sentences_gives_no_title(said):
    assert titles.cleaned(said) is None


def test_a_models_title_keeps_no_control_or_invisible_formatting_characters():
    assert titles.cleaned("Rust\x00 Tips\x1b[31m for \u202eyalp\u200b\u200b") == "Rust Tips[31m for yalp"
