"""Reading an archive as bytes: a folder or a zip read in place, a top-level JSON array
streamed element by element (``JsonArrayStream``, ``load_json_at``), and JSON lines. What the
format readers (``pipeline.ingestion.backfill.formats``) are built on; nothing here knows a
format."""

from __future__ import annotations

import codecs
import json
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from pipeline.errors import InvalidInputError

ArchivePath = Path | zipfile.Path
Opener = Callable[[ArchivePath], IO[bytes]]

CHUNK_SIZE = 1 << 20
MAX_ELEMENT_CHARS = 64 << 20  # one conversation larger than this is taken as a malformed file
_WS = " \t\r\n"


def open_binary(path: ArchivePath) -> IO[bytes]:
    return path.open("rb")


def archive_root(path: Path) -> ArchivePath:
    """``path`` itself, or, for a zip file, the folder (or the one file) inside it to read."""
    if not (path.is_file() and zipfile.is_zipfile(path)):
        return path
    root: ArchivePath = zipfile.Path(zipfile.ZipFile(path))
    entries: list[ArchivePath] = list(root.iterdir())
    while len(entries) == 1:  # one folder (or one file) wrapping everything
        root = entries[0]
        if not root.is_dir():
            break
        entries = list(root.iterdir())
    return root


def first_char(path: ArchivePath, opener: Opener) -> str:
    """The first non-blank character of a file ('' when it is blank)."""
    with opener(path) as stream:
        head = stream.read(4096).decode("utf-8-sig", errors="replace")
    return head.lstrip(_WS)[:1]


class JsonArrayStream:
    """Streams the elements of a top-level JSON array read from a binary stream, in chunks:
    memory holds one element (and one chunk), never the array. Yields ``(byte_offset, value)``
    where ``byte_offset`` is where the element starts, for ``load_json_at``.

    Raises ``InvalidInputError`` naming ``name`` when the stream is not a JSON array or an element
    is malformed (or larger than ``MAX_ELEMENT_CHARS``)."""

    def __init__(self, stream: IO[bytes], name: str, chunk_size: int = CHUNK_SIZE) -> None:
        self.stream = stream
        self.name = name
        self.chunk_size = chunk_size
        self.decoder = json.JSONDecoder()
        self.utf8 = codecs.getincrementaldecoder("utf-8-sig")()
        self.buffer = ""
        self.base = 0  # byte offset of buffer[0]
        self.eof = False

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        self._expect("[", "the file is not a JSON array")
        if self._peek() == "]":
            return
        while True:
            yield self._element()
            if self._expect(",]", "expected ',' or ']' after an element") == "]":
                return

    def _fill(self, size: int) -> bool:
        if self.eof:
            return False
        chunk = self.stream.read(size)
        self.eof = not chunk
        self.buffer += self.utf8.decode(chunk, final=self.eof)
        return not self.eof

    def _consume(self, count: int) -> None:
        self.base += len(self.buffer[:count].encode())
        self.buffer = self.buffer[count:]

    def _peek(self) -> str:
        while True:
            stripped = self.buffer.lstrip(_WS)
            self._consume(len(self.buffer) - len(stripped))
            if self.buffer or not self._fill(self.chunk_size):
                return self.buffer[:1]

    def _expect(self, allowed: str, what: str) -> str:
        char = self._peek()
        if not char or char not in allowed:
            found = repr(char) if char else "end of file"
            raise InvalidInputError(f"{self.name}: {what} (found {found} at byte {self.base})")
        self._consume(1)
        return char

    def _element(self) -> tuple[int, Any]:
        self._peek()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buffer)
            except json.JSONDecodeError as exc:
                self._grow(exc)
                continue
            offset = self.base
            self._consume(end)
            return offset, value

    def _grow(self, exc: json.JSONDecodeError) -> None:
        """An element that does not decode yet: read more (doubling, so one large element costs
        linear time), or fail at end of file or past the size bound."""
        if len(self.buffer) > MAX_ELEMENT_CHARS:
            raise InvalidInputError(
                f"{self.name}: element at byte {self.base} is malformed or larger than "
                f"{MAX_ELEMENT_CHARS} characters"
            ) from exc
        if not self._fill(max(self.chunk_size, len(self.buffer))):
            raise InvalidInputError(
                f"{self.name}: malformed JSON in the element at byte {self.base}: {exc.msg}"
            ) from exc


def load_json_at(
    path: ArchivePath, offset: int, opener: Opener, chunk_size: int = CHUNK_SIZE
) -> Any:
    """The one JSON value starting at byte ``offset`` of ``path`` (read in chunks)."""
    with opener(path) as stream:
        stream.seek(offset)
        decoder = json.JSONDecoder()
        utf8 = codecs.getincrementaldecoder("utf-8")()
        text = ""
        while True:
            chunk = stream.read(max(chunk_size, len(text)))
            text += utf8.decode(chunk, final=not chunk)
            try:
                return decoder.raw_decode(text)[0]
            except json.JSONDecodeError as exc:
                if not chunk:
                    raise InvalidInputError(f"{path}: no JSON value at byte {offset}") from exc


def iter_lines(
    path: ArchivePath, opener: Opener, start: int = 0
) -> Iterator[tuple[int, int, bytes]]:
    """``(line_number, byte_offset, raw_line)`` from ``start``, streamed; line numbers count
    from 1 at ``start``."""
    with opener(path) as stream:
        stream.seek(start)
        offset = start
        for number, raw in enumerate(stream, start=1):
            yield number, offset, raw
            offset += len(raw)


def json_line(raw: bytes) -> Any:
    """The JSON value of one line. ValueError (with the reason) when it is not JSON."""
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ValueError("not UTF-8") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} at column {exc.colno}") from exc
