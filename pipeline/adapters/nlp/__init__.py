"""Offline NLP for indexing: lemmatization for BM25 and rule-based entity extraction.

Both components run in-process with no model download, so a worker can call them on every
fact it writes. ``SimplemmaLemmatizer`` implements ``Lemmatizer``; ``RuleEntityExtractor``
implements ``EntityExtractor`` (see ``pipeline.domain.protocols``).
"""

from __future__ import annotations
