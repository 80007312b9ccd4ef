"""LLM adapters and the parsing of their replies."""

from __future__ import annotations
