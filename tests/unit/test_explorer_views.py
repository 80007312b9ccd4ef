"""The explorer's views of what it reads: typed, so its pages read attributes."""

from __future__ import annotations

from pipeline.features.explorer import ConversationMessage, message_view


def test_a_multi_part_message_shows_its_text_parts_and_names_its_images() -> None:
    message = {
        "role": "user",
        "name": "alice",
        "content": [
            {"type": "text", "text": "look at this"},
            {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
            {"type": "text", "text": "my cat"},
        ],
    }
    assert message_view(message, source=True) == ConversationMessage(
        role="user", name="alice", content="look at this\n[image]\nmy cat", source=True
    )


def test_a_plain_message_is_not_a_source_unless_marked() -> None:
    view = message_view({"role": "assistant", "content": "noted"})
    assert (view.role, view.name, view.content, view.source) == ("assistant", None, "noted", False)
