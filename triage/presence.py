"""Who has an issue open right now: kept in the cache (Redis when there is one) for a short
while, refreshed by the page as long as it stays open. Best effort: a lost update only means a
name shows a few seconds late or lingers a few seconds more."""

from __future__ import annotations

import time

from django.core.cache import cache

# A page refreshes its presence every PING_SECONDS; a name goes after SECONDS without one.
PING_SECONDS = 10
SECONDS = 30


def _key(proposal_id: int) -> str:
    return f"presence:{proposal_id}"


def here(username: str, proposal_id: int) -> None:
    now = time.time()
    viewers: dict[str, float] = cache.get(_key(proposal_id)) or {}
    fresh = {name: seen for name, seen in viewers.items() if now - seen < SECONDS}
    fresh[username] = now
    cache.set(_key(proposal_id), fresh, SECONDS)


def others(proposal_ids: list[int], username: str) -> dict[int, list[str]]:
    """Who else has each of these issues open, in one cache round trip."""
    now = time.time()
    found = cache.get_many([_key(pk) for pk in proposal_ids])
    viewing: dict[int, list[str]] = {}
    for pk in proposal_ids:
        names = sorted(
            name
            for name, seen in (found.get(_key(pk)) or {}).items()
            if name != username and now - seen < SECONDS
        )
        if names:
            viewing[pk] = names
    return viewing
