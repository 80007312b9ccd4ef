"""Lemmatization for BM25 with simplemma, and the text normalisation used to dedupe facts.

Elasticsearch here runs without analysis plugins, so memq lemmatizes in Python before indexing:
"She went running with the children" and "go run child" must meet on the same terms.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import simplemma
from simplemma.strategies.dictionaries.dictionary_factory import SUPPORTED_LANGUAGES

DEFAULT_LANGUAGE = "en"

# Typographic apostrophes are folded first so every rule below only deals with "'".
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2032": "'"})

# Contractions whose expansion is not the regular "n't" / "'ll" pattern.
_IRREGULAR = {
    "won't": "will not",
    "can't": "can not",
    "cannot": "can not",
    "shan't": "shall not",
    "ain't": "be not",
    "let's": "let us",
    "y'all": "you all",
}
_IRREGULAR_RE = re.compile(r"\b(?:" + "|".join(map(re.escape, _IRREGULAR)) + r")\b", re.I)
_NOT_RE = re.compile(r"(?<=[a-z])n't\b", re.I)
_SUFFIXES = {"m": " am", "re": " are", "ve": " have", "ll": " will", "d": " would"}
_SUFFIX_RE = re.compile(r"(?<=[a-z])'(m|re|ve|ll|d)\b", re.I)
# "'s" after these words is "is"; after anything else it is a possessive and carries no term.
_IS_HOSTS = [
    *("it", "he", "she", "that", "what", "there", "here", "who", "where", "how", "when", "why"),
    *("this", "everything", "nothing", "something", "someone", "everyone", "somebody"),
    *("everybody", "nobody"),
]
_IS_RE = re.compile(r"\b(" + "|".join(_IS_HOSTS) + r")'s\b", re.I)
_POSSESSIVE_RE = re.compile(r"(?<=\w)'s\b|(?<=s)'(?!\w)", re.I)

# A number keeps its inner separators ("3:30pm", "2023-05-07", "1,000"); a word keeps inner
# hyphens and apostrophes ("well-known", "o'clock"). Everything else is a separator.
_TOKEN_RE = re.compile(r"\d(?:[\d.,:/\-]*\d)?\w*|\w+(?:[-']\w+)*")
_TRAILING_PUNCTUATION = ".!?;,"


class SimplemmaLemmatizer:
    """``Lemmatizer`` backed by simplemma's dictionaries; pure, thread-safe, no I/O after import.

    ``lemmatize`` returns the lower-cased lemmas of ``text`` joined by single spaces: tokens made
    only of punctuation are dropped, tokens containing a digit are kept whole, and English
    contractions are expanded first ("I'm" -> "i be"). ``language`` is an ISO 639-1 code
    ("de", "fr-CA"); a code simplemma does not support falls back to English. Never raises.
    """

    def lemmatize(self, text: str, language: str = DEFAULT_LANGUAGE) -> str:
        lang = resolve_language(language)
        prepared = _prepare(unicodedata.normalize("NFKC", text), lang)
        return " ".join(_lemma(token, lang) for token in _TOKEN_RE.findall(prepared))


def resolve_language(language: str) -> str:
    """The simplemma language for an ISO code or locale ("en-US" -> "en"); English if unknown."""
    primary = language.strip().lower().replace("_", "-").split("-", 1)[0]
    return primary if primary in SUPPORTED_LANGUAGES else DEFAULT_LANGUAGE


def normalize_for_hash(text: str) -> str:
    """The form of a fact that is hashed to dedupe it.

    NFKC, casefolded, whitespace runs collapsed to one space, surrounding whitespace and
    trailing sentence punctuation (``.!?;,``) removed: "Likes pizza." and " likes  pizza"
    give the same string. Inner punctuation and word order are kept, so facts that differ in
    any word stay distinct.
    """
    collapsed = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return collapsed.rstrip(_TRAILING_PUNCTUATION + " ")


def _prepare(text: str, lang: str) -> str:
    """Fold apostrophes; expand English contractions, or split elisions ("l'homme") otherwise."""
    text = text.translate(_APOSTROPHES)
    if lang != "en":
        return text.replace("'", " ")
    return expand_contractions(text)


def expand_contractions(text: str) -> str:
    """Expand English contractions in ``text`` (straight apostrophes) and drop possessive 's.

    simplemma lemmatizes "don't" to "do" and "it's" to "its", losing the negation or the verb;
    spelling them out first gives "do not" and "it is", which then lemmatize regularly.
    """
    text = _IRREGULAR_RE.sub(lambda m: _IRREGULAR[m.group().lower()], text)
    text = _NOT_RE.sub(" not", text)
    text = _SUFFIX_RE.sub(lambda m: _SUFFIXES[m.group(1).lower()], text)
    text = _IS_RE.sub(r"\1 is", text)
    return _POSSESSIVE_RE.sub("", text)


@lru_cache(maxsize=65_536)
def _lemma(token: str, lang: str) -> str:
    """Lower-cased lemma of one token; tokens with a digit are numbers and are kept whole."""
    if any(char.isdigit() for char in token):
        return token.lower()
    # The original casing goes to simplemma: German nouns are only found capitalised.
    return simplemma.lemmatize(token, lang=lang).lower()
