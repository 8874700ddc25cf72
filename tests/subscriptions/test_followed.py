"""The index of followed task ids a cross-process bus consults before any lookup."""

from __future__ import annotations

from aml_mcp.subscriptions.followed import FollowedTasks


def test_ids_stay_followed_while_any_stream_follows_them() -> None:
    followed = FollowedTasks()
    first = followed.follow(["a", "b"])
    second = followed.follow(["b"])
    assert "a" in followed and "b" in followed and "c" not in followed
    first()
    first()  # undoing twice changes nothing
    assert "a" not in followed and "b" in followed
    second()
    assert "b" not in followed and len(followed) == 0
