"""Readers of transcript archives, over small archives written here; the driver's pure parts
(request building, checkpoint, token bucket)."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import pytest

from memq.backfill import BackfillOptions, Checkpoint, TokenBucket, requests_for
from pipeline.errors import InvalidInputError
from pipeline.ingestion.backfill import READERS, Conversation, ReaderOptions, reader_for
from pipeline.ingestion.backfill.streams import JsonArrayStream, load_json_at

# -- helpers ------------------------------------------------------------------------------------


class CountingFile(io.RawIOBase):
    """A binary file that remembers the largest read asked of it and the bytes handed out."""

    largest_read = 0
    total_read = 0

    def __init__(self, path: Path) -> None:
        self.inner = path.open("rb")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.inner.seek(offset, whence)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            raise AssertionError("the whole file was asked for")
        CountingFile.largest_read = max(CountingFile.largest_read, size)
        data = self.inner.read(size)
        CountingFile.total_read += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


def counting_opener(path: Path) -> IO[bytes]:
    return CountingFile(path)  # type: ignore[return-value]


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def chatgpt_conversation(index: int, title: str = "chat") -> dict[str, Any]:
    """A conversation with a branch: the active thread goes root → sys → u1 → a1b (not a1a)."""

    def node(nid: str, parent: str | None, role: str | None, text: str, children: list[str]):
        message = None
        if role is not None:
            message = {
                "author": {"role": role},
                "content": {"content_type": "text", "parts": [text]},
                "create_time": 1_700_000_000 + index,
            }
        return {"id": nid, "message": message, "parent": parent, "children": children}

    return {
        "id": f"conv-{index}",
        "title": f"{title} {index} é",
        "create_time": 1_700_000_000 + index * 60,
        "update_time": 1_700_000_100 + index * 60,
        "current_node": "a1b",
        "mapping": {
            "root": node("root", None, None, "", ["sys"]),
            "sys": node("sys", "root", "system", "You are helpful", ["u1"]),
            "u1": node("u1", "sys", "user", f"question {index}", ["a1a", "a1b"]),
            "a1a": node("a1a", "u1", "assistant", "old answer", []),
            "a1b": node("a1b", "u1", "assistant", f"answer {index}", ["t1"]),
            "t1": node("t1", "a1b", "tool", "tool output", []),
        },
    }


# -- registry -----------------------------------------------------------------------------------


def test_registry_names_every_format() -> None:
    assert set(READERS) == {"memq-jsonl", "chatgpt", "slack", "locomo"}


def test_unknown_format_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="unknown format"):
        reader_for("nope", tmp_path)


# -- memq-jsonl ---------------------------------------------------------------------------------


def test_jsonl_reads_conversations_and_reports_bad_lines(tmp_path: Path) -> None:
    good = {
        "user_id": "u1",
        "timestamp": "2024-01-02T03:04:05",
        "messages": [{"role": "user", "content": "hi", "name": "ann"}],
        "metadata": {"topic": "greeting"},
        "id": "c1",
    }
    path = write_jsonl(
        tmp_path / "a.jsonl",
        [
            good,
            "{not json",
            {"user_id": "u2", "timestamp": "2024-01-01", "messages": []},
            "",
            {"user_id": "u3", "timestamp": "yesterday", "messages": [{"role": "user"}]},
            {**good, "id": None, "timestamp": 1_700_000_000, "agent_id": "bot"},
        ],
    )
    reader = reader_for("memq-jsonl", path)
    items = list(reader.read())
    assert [c.user_id for c in items] == ["u1", "u1"]
    first = items[0]
    assert first.key == "u1/c1"
    assert first.timestamp == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert first.messages == [{"role": "user", "content": "hi", "name": "ann"}]
    assert first.metadata == {"source": "memq-jsonl", "topic": "greeting"}
    assert items[1].agent_id == "bot" and items[1].key.startswith("sha1-")
    assert [p.where for p in reader.problems] == [
        "a.jsonl line 2",
        "a.jsonl line 3",
        "a.jsonl line 5",
    ]
    assert "invalid JSON" in reader.problems[0].reason
    assert "'messages' is empty" in reader.problems[1].reason


def test_jsonl_load_reads_back_at_the_scanned_position(tmp_path: Path) -> None:
    lines = [
        {
            "user_id": f"u{i}",
            "timestamp": f"2024-01-{i + 1:02d}",
            "messages": [{"role": "user", "content": f"n{i} ünïcode"}],
        }
        for i in range(5)
    ]
    reader = reader_for("memq-jsonl", write_jsonl(tmp_path / "a.jsonl", lines))
    for located, conversation in zip(reader.scan(), reader.read(), strict=True):
        assert reader.load(located.position) == conversation
        assert located.message_count == 1


def test_jsonl_user_option_wins_and_missing_user_is_reported(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "a.jsonl",
        [{"timestamp": "2024-01-01", "messages": [{"role": "user", "content": "x"}]}],
    )
    assert (
        reader_for("memq-jsonl", path, ReaderOptions(user_id="me")).scan().__next__().user_id
        == "me"
    )
    with pytest.raises(InvalidInputError, match=r"no memq-jsonl conversation found.*--user-id"):
        list(reader_for("memq-jsonl", path).scan())


def test_jsonl_that_is_not_jsonl_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\nworld\n")
    with pytest.raises(InvalidInputError, match=r"notes.txt: no memq-jsonl conversation found"):
        list(reader_for("memq-jsonl", path).read())
    with pytest.raises(InvalidInputError, match="no such file"):
        reader_for("memq-jsonl", tmp_path / "missing.jsonl")


# -- chatgpt ------------------------------------------------------------------------------------


def test_chatgpt_follows_the_active_thread(tmp_path: Path) -> None:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chatgpt_conversation(0), chatgpt_conversation(1)]))
    reader = reader_for("chatgpt", tmp_path, ReaderOptions(user_id="me"))  # the folder works
    items = list(reader.read())
    assert [c.key for c in items] == ["conv-0", "conv-1"]
    assert items[1].messages == [
        {"role": "user", "content": "question 1"},
        {"role": "assistant", "content": "answer 1"},
    ]
    assert items[1].timestamp == datetime.fromtimestamp(1_700_000_060, UTC)
    assert items[1].metadata == {"source": "chatgpt", "title": "chat 1 é"}
    assert items[1].user_id == "me"


def test_chatgpt_reports_bad_conversations_and_refuses_other_files(tmp_path: Path) -> None:
    broken = chatgpt_conversation(2)
    broken["current_node"] = "missing"
    empty = {**chatgpt_conversation(3), "current_node": "sys"}
    path = tmp_path / "c.json"
    path.write_text(json.dumps([chatgpt_conversation(1), broken, empty, 42]))
    reader = reader_for("chatgpt", path, ReaderOptions(user_id="me"))
    assert [c.key for c in reader.read()] == ["conv-1"]
    reasons = [p.reason for p in reader.problems]
    assert reasons == [
        "broken thread at node 'missing'",
        "no user or assistant text in the active thread",
        "not a JSON object",
    ]
    (tmp_path / "obj.json").write_text('{"a": 1}')
    with pytest.raises(InvalidInputError, match=r"obj.json: not a ChatGPT export"):
        reader_for("chatgpt", tmp_path / "obj.json", ReaderOptions(user_id="me"))
    with pytest.raises(InvalidInputError, match="needs --user-id"):
        reader_for("chatgpt", path)


def test_chatgpt_truncated_file_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps([chatgpt_conversation(1), chatgpt_conversation(2)])[:-40])
    reader = reader_for("chatgpt", path, ReaderOptions(user_id="me", chunk_size=64))
    with pytest.raises(InvalidInputError, match=r"c.json: malformed JSON in the element at byte"):
        list(reader.read())


def test_chatgpt_streams_with_bounded_reads(tmp_path: Path) -> None:
    count = 3000
    path = tmp_path / "conversations.json"
    with path.open("w") as out:
        out.write("[\n")
        out.write(",\n".join(json.dumps(chatgpt_conversation(i)) for i in range(count)))
        out.write("\n]\n")
    size = path.stat().st_size
    CountingFile.largest_read = CountingFile.total_read = 0
    options = ReaderOptions(user_id="me", chunk_size=4096, opener=counting_opener)
    reader = reader_for("chatgpt", path, options)
    scanned = list(reader.scan())
    assert len(scanned) == count and not reader.problems
    assert CountingFile.largest_read <= 4096  # one conversation is ~1.5 kB: never more than a chunk
    assert size > 3_000_000 and CountingFile.total_read <= size + 8192  # each byte read once
    middle = scanned[count // 2]
    assert reader.load(middle.position).messages[0]["content"] == f"question {count // 2}"


def test_json_array_stream_offsets_and_large_elements() -> None:
    text = '[ {"a": "é"} , {"b": "' + "x" * 10_000 + '"}, 3 ]'
    data = text.encode()
    elements = list(JsonArrayStream(io.BytesIO(data), "mem", chunk_size=16))
    assert elements[0][1] == {"a": "é"} and elements[2][1] == 3
    decoder = json.JSONDecoder()
    for offset, value in elements:  # each offset is where the element's bytes start
        assert decoder.raw_decode(data[offset:].decode())[0] == value
    assert list(JsonArrayStream(io.BytesIO(b" [ ] "), "mem", chunk_size=1)) == []
    with pytest.raises(InvalidInputError, match="expected ',' or ']'"):
        list(JsonArrayStream(io.BytesIO(b"[1 2]"), "mem"))


def test_load_json_at_reads_one_value(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b'[{"a": 1}, {"b": [2, 3]}]')
    assert load_json_at(path, 11, lambda p: p.open("rb"), chunk_size=2) == {"b": [2, 3]}


# -- slack --------------------------------------------------------------------------------------


def slack_export(root: Path, with_index: bool = True) -> Path:
    general = root / "general"
    general.mkdir(parents=True)
    (general / "2024-03-01.json").write_text(
        json.dumps(
            [
                {"user": "U1", "text": "first", "ts": "1709280000.000100"},
                {"user": "U2", "text": "later", "ts": "1709290000.000100"},
                {
                    "user": "U2",
                    "text": "reply",
                    "ts": "1709285000.000100",
                    "thread_ts": "1709280000.000100",
                },
                {
                    "user": "U3",
                    "text": "<@U3> has joined",
                    "ts": "1709270000.0",
                    "subtype": "channel_join",
                },
            ]
        )
    )
    (general / "2024-03-02.json").write_text(
        json.dumps([{"user": "U1", "text": "next day", "ts": "1709370000.0"}])
    )
    (general / "notes.txt").write_text("not a day")
    random = root / "random"
    random.mkdir()
    (random / "2024-03-01.json").write_text(json.dumps({"not": "a list"}))
    if with_index:
        (root / "channels.json").write_text(json.dumps([{"name": "random"}, {"name": "general"}]))
    return root


def test_slack_one_conversation_per_channel_day_with_threads_folded(tmp_path: Path) -> None:
    reader = reader_for("slack", slack_export(tmp_path))
    items = list(reader.read())
    assert [c.key for c in items] == ["general/2024-03-01", "general/2024-03-02"]
    day = items[0]
    assert day.user_id == "general"
    assert [m["content"] for m in day.messages] == ["first", "reply", "later"]
    assert day.messages[0] == {"role": "user", "content": "first", "name": "U1"}
    assert day.timestamp == datetime.fromtimestamp(1709280000.0001, UTC)
    assert day.metadata == {"source": "slack", "channel": "general", "day": "2024-03-01"}
    assert [(p.where, p.reason) for p in reader.problems] == [
        ("random/2024-03-01.json", "not a JSON array of messages")
    ]


def test_slack_user_option_and_no_index(tmp_path: Path) -> None:
    reader = reader_for("slack", slack_export(tmp_path, with_index=False), ReaderOptions("me"))
    assert {c.user_id for c in reader.read()} == {"me"}


def test_slack_names_people_from_users_json(tmp_path: Path) -> None:
    root = slack_export(tmp_path)
    users = [
        {"id": "U1", "name": "ana", "profile": {"display_name": "Ana", "real_name": "Ana Lima"}},
        {"id": "U2", "name": "bo", "real_name": "Bo Chen", "profile": {"display_name": ""}},
        {"name": "no id"},
    ]
    (root / "users.json").write_text(json.dumps(users))
    day = next(reader_for("slack", root).read())
    assert [(m["name"], m["content"]) for m in day.messages] == [
        ("Ana", "first"),
        ("Bo Chen", "reply"),
        ("Bo Chen", "later"),
    ]
    (root / "users.json").write_text("{not json")
    with pytest.raises(InvalidInputError, match=r"users\.json: not JSON"):
        next(reader_for("slack", root).read())


def zipped(folder: Path, archive: Path, inside: str = "") -> Path:
    """``folder``'s files in a zip, under the folder ``inside`` of the zip (or at its root)."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                out.write(path, str(Path(inside) / path.relative_to(folder)))
    return archive


def test_slack_and_chatgpt_exports_are_read_zipped(tmp_path: Path) -> None:
    slack = slack_export(tmp_path / "slack")
    (slack / "users.json").write_text(json.dumps([{"id": "U1", "name": "ana"}]))
    for inside in ("", "export-2024"):
        archive = zipped(slack, tmp_path / f"slack{inside}.zip", inside)
        reader = reader_for("slack", archive)
        items = list(reader.read())
        assert [c.key for c in items] == ["general/2024-03-01", "general/2024-03-02"]
        assert items[0].messages[0]["name"] == "ana"
        assert [p.where for p in reader.problems] == ["random/2024-03-01.json"]
        located = list(reader_for("slack", archive).scan())
        assert reader.load(located[1].position) == items[1]

    chatgpt = tmp_path / "chatgpt"
    chatgpt.mkdir()
    conversations = [chatgpt_conversation(i) for i in range(3)]
    (chatgpt / "conversations.json").write_text(json.dumps(conversations))
    (chatgpt / "chat.html").write_text("<html></html>")
    reader = reader_for("chatgpt", zipped(chatgpt, tmp_path / "gpt.zip"), ReaderOptions("me"))
    located = list(reader.scan())
    assert len(located) == 3
    assert reader.load(located[2].position) == list(reader.read())[2]


def test_a_zip_without_the_export_is_bad_input(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("x")
    (other / "b.txt").write_text("y")
    with pytest.raises(InvalidInputError, match=r"conversations\.json"):
        reader_for("chatgpt", zipped(other, tmp_path / "o.zip"), ReaderOptions("me"))
    with pytest.raises(InvalidInputError, match="not a Slack export"):
        reader_for("slack", zipped(other, tmp_path / "o.zip"))


def test_slack_refuses_what_is_not_an_export(tmp_path: Path) -> None:
    (tmp_path / "file.json").write_text("[]")
    with pytest.raises(InvalidInputError, match="a Slack export is a folder"):
        reader_for("slack", tmp_path / "file.json")
    with pytest.raises(InvalidInputError, match="not a Slack export"):
        reader_for("slack", tmp_path)


# -- locomo -------------------------------------------------------------------------------------


def locomo_sample(sample_id: str) -> dict[str, Any]:
    return {
        "sample_id": sample_id,
        "qa": [],
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Mel Jones",
            "session_2": [{"speaker": "Mel Jones", "dia_id": "D2:1", "text": "Later"}],
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_1": [
                {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hey Mel!"},
                {"speaker": "Mel Jones", "dia_id": "D1:2", "text": "Look", "blip_caption": "a dog"},
            ],
            "session_1_date_time": "1:56 pm on 8 May, 2023",
        },
    }


def test_locomo_samples_layout(tmp_path: Path) -> None:
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps([locomo_sample("conv-1"), locomo_sample("conv-2")]))
    reader = reader_for("locomo", tmp_path, ReaderOptions(chunk_size=32))
    items = list(reader.read())
    assert [c.key for c in items] == [
        "conv-1/session_1",
        "conv-1/session_2",
        "conv-2/session_1",
        "conv-2/session_2",
    ]
    first = items[0]
    assert first.timestamp == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert first.user_id == "conv-1"
    assert first.messages[1] == {
        "role": "user",
        "content": "Mel Jones: Look [shares a photo: a dog]",
        "name": "Mel Jones",
    }
    located = list(reader.scan())
    assert reader.load(located[3].position) == items[3]


def test_locomo_turns_layout_groups_sessions(tmp_path: Path) -> None:
    def turn(conv: str, session: str, text: str) -> dict[str, Any]:
        return {
            "conv_id": conv,
            "session_id": session,
            "session_datetime_iso": "2023-05-08T13:56",
            "session_datetime": "1:56 pm on 8 May, 2023",
            "speaker": "Ann",
            "text": text,
        }

    path = write_jsonl(
        tmp_path / "turns.jsonl",
        [
            turn("c1", "session_1", "a"),
            turn("c1", "session_1", "b"),
            "oops",
            turn("c1", "session_2", "c"),
            turn("c2", "session_1", "d"),
            turn("c1", "session_1", "e"),
        ],
    )
    reader = reader_for("locomo", path)
    items: list[Conversation] = list(reader.read())
    assert [(c.key, len(c.messages)) for c in items] == [
        ("c1/session_1", 2),
        ("c1/session_2", 1),
        ("c2/session_1", 1),
    ]
    assert items[0].messages[1]["content"] == "Ann: b"
    assert [p.reason for p in reader.problems] == [
        "invalid JSON: Expecting value at column 1",
        "its turns are not contiguous in the file",
    ]
    located = list(reader.scan())
    assert reader.load(located[1].position) == items[1]


def test_locomo_refuses_other_files(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("session notes")
    with pytest.raises(InvalidInputError, match=r"x\.txt: not LoCoMo"):
        reader_for("locomo", tmp_path / "x.txt")
    write_jsonl(tmp_path / "qa.jsonl", [{"question": "q", "answer": "a"}])
    with pytest.raises(InvalidInputError, match=r"qa\.jsonl: no locomo conversation found"):
        list(reader_for("locomo", tmp_path / "qa.jsonl").read())


# -- the driver's pure parts --------------------------------------------------------------------


def conversation(messages: list[dict[str, str]]) -> Conversation:
    return Conversation(
        key="k1",
        user_id="u1",
        timestamp=datetime(2024, 1, 1, tzinfo=UTC),
        messages=messages,
        metadata={"source": "memq-jsonl"},
    )


def test_requests_for_one_job_with_the_backfill_key() -> None:
    options = BackfillOptions(fmt="memq-jsonl", tenant="t1")
    [(key, request)] = requests_for(
        conversation([{"role": "user", "content": "hi", "name": "Mel Jones"}]), options
    )
    assert key == "backfill:memq-jsonl:k1"
    assert request.scope.tenant == "t1" and request.scope.user_id == "u1"
    assert request.messages[0].name == "Mel_Jones"
    assert request.metadata == {"source": "memq-jsonl", "backfill_key": "k1"}
    assert request.infer is False and request.timestamp == datetime(2024, 1, 1, tzinfo=UTC)


def test_requests_for_splits_long_conversations_and_messages() -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(1001)]
    messages.append({"role": "assistant", "content": "x" * 250_000})
    parts = requests_for(conversation(messages), BackfillOptions(fmt="memq-jsonl"))
    assert [k for k, _ in parts] == [
        "backfill:memq-jsonl:k1",
        "backfill:memq-jsonl:k1#part2",
        "backfill:memq-jsonl:k1#part3",
    ]
    assert [len(r.messages) for _, r in parts] == [500, 500, 4]
    assert parts[2][1].metadata["part"] == 3


def test_requests_for_refuses_bad_conversations() -> None:
    with pytest.raises(ValueError, match="no message with text"):
        requests_for(conversation([{"role": "user", "content": "  "}]), BackfillOptions("x"))
    with pytest.raises(ValueError, match="role"):
        requests_for(conversation([{"role": "robot", "content": "x"}]), BackfillOptions("x"))


def test_checkpoint_round_trip_and_format_check(tmp_path: Path) -> None:
    path = tmp_path / "ck.json"
    checkpoint = Checkpoint(path, "slack", done={"a", "b"}, failed={"c": {"reason": "r"}})
    checkpoint.save(now=100.0, force=True)
    again = Checkpoint.load(path, "slack")
    assert again.done == {"a", "b"} and again.failed == {"c": {"reason": "r"}}
    assert [p.name for p in tmp_path.iterdir()] == ["ck.json"]  # no temp file left
    with pytest.raises(InvalidInputError, match="checkpoint of format slack, not chatgpt"):
        Checkpoint.load(path, "chatgpt")
    path.write_text("garbage")
    with pytest.raises(InvalidInputError, match="not a backfill checkpoint"):
        Checkpoint.load(path, "slack")


def test_token_bucket_delays_a_burst() -> None:
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    bucket = TokenBucket(rate=2.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(6):
        bucket.acquire()
    assert now[0] == pytest.approx(2.0)  # 2 at once (the burst), then 4 more at 2 per second
    assert len(sleeps) == 4
