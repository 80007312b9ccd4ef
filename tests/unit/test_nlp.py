"""Unit tests of the offline NLP components: the simplemma lemmatizer and the rule extractor."""

from __future__ import annotations

import hashlib

import pytest

from pipeline.adapters.nlp.entities import RuleEntityExtractor, extract_entities
from pipeline.adapters.nlp.lemmatize import (
    SimplemmaLemmatizer,
    expand_contractions,
    normalize_for_hash,
    resolve_language,
)
from pipeline.domain.protocols import Entity, EntityExtractor, Lemmatizer


@pytest.fixture(scope="module")
def lemmatizer() -> SimplemmaLemmatizer:
    return SimplemmaLemmatizer()


@pytest.fixture(scope="module")
def extractor() -> RuleEntityExtractor:
    return RuleEntityExtractor()


def _pairs(text: str) -> list[tuple[str, str]]:
    return [(entity.text, entity.type) for entity in extract_entities(text)]


# --- lemmatizer -----------------------------------------------------------------------------


def test_lemmatizer_implements_the_protocol(lemmatizer: SimplemmaLemmatizer) -> None:
    assert isinstance(lemmatizer, Lemmatizer)


@pytest.mark.parametrize(
    ("word", "lemma"),
    [("went", "go"), ("children", "child"), ("studies", "study"), ("running", "run")],
)
def test_inflected_words_become_their_lemma(
    lemmatizer: SimplemmaLemmatizer, word: str, lemma: str
) -> None:
    assert lemmatizer.lemmatize(word) == lemma


def test_sentence_is_lower_cased_lemmas_joined_by_single_spaces(
    lemmatizer: SimplemmaLemmatizer,
) -> None:
    result = lemmatizer.lemmatize("She WENT running   with the Children.\n\tStudies!")
    assert result == "she go run with the child study"


@pytest.mark.parametrize("text", ["", "   ", "...", "!?!", "— … ;:() --"])
def test_punctuation_only_text_gives_empty_string(
    lemmatizer: SimplemmaLemmatizer, text: str
) -> None:
    assert lemmatizer.lemmatize(text) == ""


def test_punctuation_tokens_are_dropped(lemmatizer: SimplemmaLemmatizer) -> None:
    assert lemmatizer.lemmatize("Hello, world!!! (really) — yes?") == "hello world really yes"


@pytest.mark.parametrize("number", ["7", "2023", "3:30pm", "2023-05-07", "1,000", "3.5", "10th"])
def test_numbers_are_kept_whole(lemmatizer: SimplemmaLemmatizer, number: str) -> None:
    tokens = lemmatizer.lemmatize(f"We met {number}, then ran.").split()
    assert tokens == ["we", "meet", number, "then", "run"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I'm happy", "i be happy"),
        ("I don't know", "i do not know"),
        ("it's fine", "it be fine"),
        ("we'll see", "we will see"),
        ("they're here", "they be here"),
        ("I've been", "i have be"),
        ("she won't go", "she will not go"),
        ("I can't", "i can not"),
    ],
)
def test_contractions_are_expanded_before_lemmatizing(
    lemmatizer: SimplemmaLemmatizer, text: str, expected: str
) -> None:
    assert lemmatizer.lemmatize(text) == expected


def test_typographic_apostrophes_expand_like_straight_ones(
    lemmatizer: SimplemmaLemmatizer,
) -> None:
    curly = lemmatizer.lemmatize("I\u2019m sure it\u2019s fine, don\u2019t worry, we\u2019ll go")
    assert curly == "i be sure it be fine do not worry we will go"


def test_possessives_leave_the_bare_noun(lemmatizer: SimplemmaLemmatizer) -> None:
    assert lemmatizer.lemmatize("Caroline's dog and James' car") == "caroline dog and james car"


def test_expand_contractions_keeps_words_with_inner_apostrophes() -> None:
    assert expand_contractions("at five o'clock") == "at five o'clock"


@pytest.mark.parametrize(
    ("language", "text", "expected"),
    [
        ("de", "Die Häuser sind groß", "der haus sein groß"),
        ("fr", "les chevaux", "le cheval"),
        ("DE", "Häuser", "haus"),
        ("de-AT", "Häuser", "haus"),
    ],
)
def test_supported_languages_use_their_own_dictionary(
    lemmatizer: SimplemmaLemmatizer, language: str, text: str, expected: str
) -> None:
    assert lemmatizer.lemmatize(text, language) == expected


def test_french_elisions_are_split_not_glued(lemmatizer: SimplemmaLemmatizer) -> None:
    assert lemmatizer.lemmatize("l'homme", "fr") == "l homme"


@pytest.mark.parametrize("language", ["xx", "", "klingon", "zz-ZZ"])
def test_unknown_languages_fall_back_to_english(
    lemmatizer: SimplemmaLemmatizer, language: str
) -> None:
    text = "I'm running with the children"
    assert lemmatizer.lemmatize(text, language) == lemmatizer.lemmatize(text, "en")
    assert lemmatizer.lemmatize(text, language) == "i be run with the child"


@pytest.mark.parametrize(
    ("code", "resolved"),
    [("en", "en"), ("en-US", "en"), ("pt_BR", "pt"), (" FR ", "fr"), ("xx", "en"), ("", "en")],
)
def test_resolve_language(code: str, resolved: str) -> None:
    assert resolve_language(code) == resolved


# --- normalize_for_hash ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "variant",
    [
        "Likes pizza.",
        "likes  pizza",
        "  LIKES pizza!? ",
        "likes\tpizza\n",
        "Likes pizza ;",
        "likes pizza",
    ],
)
def test_variants_of_one_fact_normalise_equally(variant: str) -> None:
    assert normalize_for_hash(variant) == "likes pizza"


def test_md5_of_normalised_variants_match() -> None:
    def digest(text: str) -> str:
        return hashlib.md5(normalize_for_hash(text).encode()).hexdigest()

    assert digest("Likes pizza.") == digest("likes  pizza")
    assert digest("likes pizza") != digest("likes pasta")


@pytest.mark.parametrize(
    ("left", "right"),
    [("likes pizza", "likes pasta"), ("e.g. pizza", "eg pizza"), ("pizza likes", "likes pizza")],
)
def test_different_facts_stay_different(left: str, right: str) -> None:
    assert normalize_for_hash(left) != normalize_for_hash(right)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\ufb01ne wine", "fine wine"),  # NFKC unfolds the "fi" ligature
        ("\uff2cikes", "likes"),  # fullwidth letter
        ("Straße", "strasse"),  # casefold, not lower
        ("Is it 3.5?", "is it 3.5"),  # inner punctuation is kept
        ("...", ""),
        ("", ""),
    ],
)
def test_normalize_for_hash_details(text: str, expected: str) -> None:
    assert normalize_for_hash(text) == expected


# --- entity extractor -----------------------------------------------------------------------


def test_extractor_implements_the_protocol(extractor: RuleEntityExtractor) -> None:
    assert isinstance(extractor, EntityExtractor)


def test_name_acronym_and_date_in_text_order() -> None:
    text = "Caroline went to an LGBTQ support group on 7 May 2023."
    assert extract_entities(text) == [
        Entity("Caroline", "name"),
        Entity("LGBTQ", "acronym"),
        Entity("7 May 2023", "date"),
    ]


def test_brands_places_and_people_but_no_relative_date() -> None:
    text = "Melanie bought a Canon camera at Target in Seattle and joined Google last Friday."
    assert _pairs(text) == [
        ("Melanie", "name"),
        ("Canon", "name"),
        ("Target", "name"),
        ("Seattle", "name"),
        ("Google", "name"),
    ]


def test_greeting_is_dropped_and_name_kept() -> None:
    assert _pairs("Hey Caroline! Good to see you!") == [("Caroline", "name")]


def test_inner_connector_joins_a_name_and_a_preposition_splits_names() -> None:
    assert _pairs("I went to the Bank of America in New York") == [
        ("Bank of America", "name"),
        ("New York", "name"),
    ]


def test_extract_returns_one_list_per_text_in_order(extractor: RuleEntityExtractor) -> None:
    result = extractor.extract(["Hi Jon!", "", "nothing to see here.", "NASA called."])
    assert result == [
        [Entity("Jon", "name")],
        [],
        [],
        [Entity("NASA", "acronym")],
    ]


def test_extract_of_no_texts_is_empty(extractor: RuleEntityExtractor) -> None:
    assert extractor.extract([]) == []


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "i like pizza and long walks.",
        "Thanks! That was great. I'm so happy for you.",
        "Wow, that's cool! Did you go?",
        "See you on Friday in June, or maybe next week.",
        "We went there yesterday and last Friday.",
    ],
)
def test_texts_without_entities(text: str) -> None:
    assert extract_entities(text) == []


def test_sentence_initial_name_is_kept_but_common_words_are_not() -> None:
    text = "Caroline went home. Thanks, Melanie! Good Morning Emily. Playing guitar helps."
    assert _pairs(text) == [("Caroline", "name"), ("Melanie", "name"), ("Emily", "name")]


def test_sentence_initial_short_adverbs_are_not_names() -> None:
    text = "Mostly the Haute Route. Lastly, Kelly came. Mainly with Carly. Exactly, said Emily."
    assert _pairs(text) == [
        ("Haute Route", "name"),
        ("Kelly", "name"),
        ("Carly", "name"),
        ("Emily", "name"),
    ]


def test_capitalised_common_word_mid_sentence_is_part_of_a_title() -> None:
    assert _pairs("We watched Good Will Hunting again") == [("Good Will Hunting", "name")]


def test_camel_case_brands_are_names() -> None:
    assert _pairs("My iPhone paid with PayPal for an eBay order") == [
        ("iPhone", "name"),
        ("PayPal", "name"),
        ("eBay", "name"),
    ]


@pytest.mark.parametrize("apostrophe", ["'", "\u2019"])
def test_possessive_is_stripped(apostrophe: str) -> None:
    assert _pairs(f"I love Nature{apostrophe}s way and Caroline{apostrophe}s dog") == [
        ("Nature", "name"),
        ("Caroline", "name"),
    ]


def test_contractions_are_not_names() -> None:
    assert _pairs("I'm sure. Don't worry. We'll see, Mel.") == [("Mel", "name")]


def test_ampersand_and_of_the_join_but_and_and_the_do_not() -> None:
    text = "Johnson & Johnson hired Caroline and Melanie at the University of the Arts."
    assert [entity for entity, _ in _pairs(text)] == [
        "Johnson & Johnson",
        "Caroline",
        "Melanie",
        "University of the Arts",
    ]


def test_the_between_two_names_does_not_join_them() -> None:
    assert _pairs("I told Caroline the Dodgers won") == [
        ("Caroline", "name"),
        ("Dodgers", "name"),
    ]


def test_trailing_connector_is_not_part_of_the_name() -> None:
    assert _pairs("We met at the Bank of.") == [("Bank", "name")]


def test_acronym_inside_a_longer_span_makes_it_a_name() -> None:
    assert _pairs("She runs the LGBTQ Center downtown") == [("LGBTQ Center", "name")]


def test_spans_longer_than_six_words_are_ignored() -> None:
    assert _pairs("we saw One Two Three Four Five Six there") == [
        ("One Two Three Four Five Six", "name")
    ]
    assert _pairs("we saw One Two Three Four Five Six Seven there") == []


def test_duplicates_are_removed_case_insensitively_keeping_the_first() -> None:
    assert _pairs("NASA called. Then Nasa wrote, and Caroline met Caroline.") == [
        ("NASA", "acronym"),
        ("Caroline", "name"),
    ]


@pytest.mark.parametrize(
    ("text", "date"),
    [
        ("It was on 7 May 2023.", "7 May 2023"),
        ("It was on May 7, 2023 at noon.", "May 7, 2023"),
        ("It was on 2023-05-07.", "2023-05-07"),
        ("It started 2023-05-08T13:56 sharp.", "2023-05-08"),
        ("Back in May 2023 we moved.", "May 2023"),
        ("That was on 8 May, 2023.", "8 May, 2023"),
        ("That was on the 7th of May 2023.", "7th of May 2023"),
        ("That was on Friday, 8 May 2023.", "Friday, 8 May 2023"),
        ("It is due Sept. 2024 or so.", "Sept. 2024"),
    ],
)
def test_absolute_dates(text: str, date: str) -> None:
    assert _pairs(text) == [(date, "date")]


def test_a_date_does_not_glue_names_around_it() -> None:
    assert _pairs("Seattle May 2023 Google") == [
        ("Seattle", "name"),
        ("May 2023", "date"),
        ("Google", "name"),
    ]


def test_extraction_is_deterministic(extractor: RuleEntityExtractor) -> None:
    texts = ["Caroline met Melanie in Paris on 7 May 2023 at NASA."] * 3
    first, *rest = extractor.extract(texts)
    assert all(result == first for result in rest)


def test_questions_lose_their_function_words() -> None:
    from pipeline.adapters.nlp.stopwords import without_stopwords

    assert without_stopwords("Where does the user live and what do they eat?") == "user live eat"
    assert without_stopwords("When did Caroline go to the LGBTQ support group?") == (
        "Caroline go LGBTQ support group"
    )
    assert without_stopwords("what is it") == ""
