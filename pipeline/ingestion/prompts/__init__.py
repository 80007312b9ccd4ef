"""Prompts as versioned package files: ``{name}_v{version}.txt`` next to this module.

A changed prompt is a new file (``extract_user_v2.txt``), never an edit of a released one, so a
job can record exactly which text produced its memories (``Prompt.key``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

from pipeline.errors import ConfigurationError

_FILE_NAME = re.compile(r"^(?P<name>[a-z0-9_]+)_v(?P<version>\d+)\.txt$")
_KEY = re.compile(r"^(?P<name>[a-z0-9_]+?)(?:_v(?P<version>\d+))?$")
# ``{observation_date}`` is a placeholder; ``{"memory": []}`` (a JSON example) is not.
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True)
class Prompt:
    """One prompt file's text. ``render`` fills its ``{placeholders}``."""

    name: str
    version: int
    text: str

    @property
    def key(self) -> str:
        """``name_vN``: what a job records to say which prompt it used."""
        return f"{self.name}_v{self.version}"

    @property
    def placeholders(self) -> frozenset[str]:
        return frozenset(_PLACEHOLDER.findall(self.text))

    def render(self, **values: str) -> str:
        """The text with each ``{placeholder}`` replaced by ``values[placeholder]``.

        Literal replacement, not ``str.format``: the JSON examples' braces stay as they are,
        and braces inside the values are never interpreted. Extra values are ignored.
        Raises ``ConfigurationError`` when a placeholder has no value.
        """
        missing = self.placeholders - values.keys()
        if missing:
            raise ConfigurationError(f"prompt {self.key} needs values for {sorted(missing)}")
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), self.text)


def load_prompt(name: str) -> Prompt:
    """The prompt ``name``: ``"extract_user_v1"`` exactly, or ``"extract_user"`` for the newest
    version. Raises ``ConfigurationError`` when no such prompt file ships with memq.
    """
    shipped = _versions()
    key = _KEY.match(name)
    versions = shipped.get(key.group("name"), {}) if key is not None else {}
    if key is None or not versions:
        raise ConfigurationError(f"unknown prompt {name!r}; known: {sorted(shipped)}")
    wanted = key.group("version")
    version = int(wanted) if wanted is not None else max(versions)
    if version not in versions:
        raise ConfigurationError(f"unknown prompt {name!r}; versions: {sorted(versions)}")
    return Prompt(name=key.group("name"), version=version, text=versions[version])


@cache
def _versions() -> Mapping[str, Mapping[int, str]]:
    """Every shipped prompt: name → version → text. Read once per process: the files ship with
    the package and a released one is never edited (listing and reading them on every LLM call
    was a measurable share of the I/O worker's time)."""
    found: dict[str, dict[int, str]] = {}
    for entry in resources.files(__name__).iterdir():
        match = _FILE_NAME.match(entry.name)
        if match is not None and entry.is_file():
            text = entry.read_text(encoding="utf-8")
            found.setdefault(match.group("name"), {})[int(match.group("version"))] = text
    return found
