"""Incremental sync of a queue's issues from GitHub."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from triage import github, ingest
from triage.models import Issue, Queue

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)

# Store progress every this many issues, so the console can show it without a write per issue.
PROGRESS_EVERY = 10


def sync_queue(queue: Queue, on_changed: Callable[[Issue], None]) -> int:
    """Fetch what changed since the queue's cursor; returns how many issues were read.

    The first sync reads the open issues of the last TRIAGE_FIRST_SYNC_DAYS; later ones read
    every state, so that closed or relabelled issues leave the inbox. `on_changed` is called,
    inside the issue's transaction, for each issue whose content changed.
    """
    if queue.sync_cursor is None:
        since = timezone.now() - timedelta(days=settings.TRIAGE_FIRST_SYNC_DAYS)
        state = "open"
    else:
        since, state = queue.sync_cursor, "all"
    seen = 0
    skipped: list[str] = []
    labels = list(queue.require_labels)
    unchanged, etag = github.listing_unchanged(
        queue.repository, labels=labels, since=since, state=state, etag=queue.sync_etag
    )
    if unchanged:
        _finish(queue, seen=0, etag=etag, error="")
        return 0

    def known_comments(number: int) -> int | None:
        stored = (
            Issue.objects.filter(repository=queue.repository, number=number)
            .values_list("comments", flat=True)
            .first()
        )
        return None if stored is None else len(stored)

    for raw, comments in github.iter_issues(
        queue.repository, labels=labels, since=since, state=state, known_comments=known_comments
    ):
        try:
            fields = ingest.parse(raw, comments)
            with transaction.atomic():
                issue, changed = ingest.upsert(queue.repository, fields)
                if changed:
                    on_changed(issue)
        except (ingest.IssueFormatError, DatabaseError) as exc:
            # One issue that cannot be stored must not stop the queue: it is skipped, reported,
            # and read again when it next changes.
            skipped.append(f"#{raw.get('number', '?')}: {exc}"[:300])
            log.warning("sync of %s skipped an issue: %s", queue, skipped[-1])
            fields = None
        # The cursor only moves forward, past each issue read: an interrupted sync resumes.
        updated = fields.updated_at if fields is not None else _updated_at(raw)
        if updated is not None and (queue.sync_cursor is None or updated > queue.sync_cursor):
            queue.sync_cursor = updated
        seen += 1
        if seen % PROGRESS_EVERY == 0:
            Queue.objects.filter(pk=queue.pk).update(sync_cursor=queue.sync_cursor, sync_seen=seen)
    error = (
        f"Skipped {len(skipped)} issue(s) that could not be stored: " + "; ".join(skipped[:5])
        if skipped
        else ""
    )
    _finish(queue, seen=seen, etag=etag, error=error)
    return seen


def _finish(queue: Queue, *, seen: int, etag: str, error: str) -> None:
    remaining, limit, reset = github.rate_budget()
    Queue.objects.filter(pk=queue.pk).update(
        sync_cursor=queue.sync_cursor,
        sync_seen=seen,
        sync_state=Queue.SyncState.IDLE,
        sync_finished_at=timezone.now(),
        sync_error=error,
        sync_etag=etag,
        rate_remaining=remaining,
        rate_limit=limit,
        rate_reset_at=reset,
    )


def _updated_at(raw: Any) -> datetime | None:
    value = raw.get("updated_at") if isinstance(raw, dict) else None
    parsed = parse_datetime(value) if isinstance(value, str) else None
    return parsed if parsed is not None and parsed.tzinfo is not None else None
