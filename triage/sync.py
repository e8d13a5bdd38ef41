"""Incremental sync of a queue's issues from GitHub."""

from __future__ import annotations

import logging
from dataclasses import dataclass
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

    # First the listing (100 issues a request), storing each issue without its comments; then
    # the comments of the issues whose count differs from what is stored, in as few requests
    # as the budget allows. The cursor moves only once both are done: a sync interrupted in
    # between reads the same issues again rather than missing their comments.
    cursor = queue.sync_cursor
    changed: set[int] = set()
    waiting: dict[int, Waiting] = {}
    page: dict[int, tuple[ingest.IssueFields, int | None, Reader]] = {}

    def store_page() -> None:
        for issue, _, content_changed, count, read_comments in _store(queue, page, skipped):
            if content_changed:
                changed.add(issue.pk)
            if count is not None and count != len(issue.comments):
                waiting[issue.pk] = Waiting(issue.number, count, read_comments)
        page.clear()

    for raw, read_comments in github.iter_issues(
        queue.repository, labels=labels, since=since, state=state
    ):
        try:
            fields = ingest.parse(raw)
        except ingest.IssueFormatError as exc:
            # One issue that cannot be stored must not stop the queue: it is skipped, reported,
            # and read again when it next changes.
            skipped.append(f"#{raw.get('number', '?')}: {exc}"[:300])
            log.warning("sync of %s skipped an issue: %s", queue, skipped[-1])
            updated = _updated_at(raw)
        else:
            count = raw.get("comments")
            # Listed twice (it changed while the pages were read): its last reading stands.
            page[fields.number] = (fields, count if isinstance(count, int) else None, read_comments)
            updated = fields.updated_at
            if len(page) == STORE_EVERY:
                store_page()
        if updated is not None and (cursor is None or updated > cursor):
            cursor = updated
        seen += 1
        if seen % PROGRESS_EVERY == 0:
            Queue.objects.filter(pk=queue.pk).update(sync_seen=seen)
    store_page()
    changed |= _store_comments(queue.repository, since, waiting)
    for issue in Issue.objects.filter(pk__in=changed).order_by("pk"):
        on_changed(issue)
    queue.sync_cursor = cursor
    error = (
        f"Skipped {len(skipped)} issue(s) that could not be stored: " + "; ".join(skipped[:5])
        if skipped
        else ""
    )
    _finish(queue, seen=seen, etag=etag, error=error)
    return seen


# Issues stored a round trip: one page of GitHub's listing.
STORE_EVERY = 100
type Reader = Callable[[], list[dict[str, Any]]]


def _store(
    queue: Queue,
    page: dict[int, tuple[ingest.IssueFields, int | None, Reader]],
    skipped: list[str],
) -> list[tuple[Issue, bool, bool, int | None, Reader]]:
    """Store a page of issues in one transaction; if that fails, one by one, so that the issue
    that cannot be stored is skipped and reported and the others are kept."""
    rows = list(page.values())
    try:
        with transaction.atomic():
            stored = ingest.upsert_many(queue.repository, [fields for fields, _, _ in rows])
        return [
            (issue, created, changed, count, read)
            for (issue, created, changed), (_, count, read) in zip(stored, rows, strict=True)
        ]
    except DatabaseError:
        pass
    kept = []
    for fields, count, read in rows:
        try:
            with transaction.atomic():
                issue, changed = ingest.upsert(queue.repository, fields)
        except DatabaseError as exc:
            skipped.append(f"#{fields.number}: {exc}"[:300])
            log.warning("sync of %s skipped an issue: %s", queue, skipped[-1])
            continue
        kept.append((issue, False, changed, count, read))
    return kept


@dataclass(frozen=True)
class Waiting:
    """An issue stored without its comments: how many GitHub counts, and how to read them."""

    number: int
    count: int
    read: Reader


# From this many issues whose comments are wanted, one listing of the repository's comments
# (100 a request, every issue) costs fewer requests than one request per issue.
REPOSITORY_COMMENTS_FROM = 30


def _store_comments(
    repository: str,
    since: datetime | None,
    waiting: dict[int, Waiting],
) -> set[int]:
    """Read and store the comments of the waiting issues; returns the ids whose content changed.

    The repository's listing holds only comments updated since `since`: an issue whose count it
    does not make up (older comments) is read on its own.
    """
    found: dict[int, list[dict[str, Any]]] = {}
    if len(waiting) >= REPOSITORY_COMMENTS_FROM:
        wanted = {one.number for one in waiting.values()}
        for number, comment in github.iter_repository_comments(repository, since):
            if number in wanted:
                found.setdefault(number, []).append(comment)
    changed: set[int] = set()
    issues = Issue.objects.in_bulk(list(waiting))
    for issue_id, one in waiting.items():
        issue = issues.get(issue_id)
        if issue is None:
            continue
        comments = found.get(one.number, [])
        if len(comments) < one.count:
            comments = one.read()
        try:
            raw_comments = [ingest.comment(c) for c in comments]
        except ingest.IssueFormatError as exc:
            log.warning("sync of %s#%s skipped its comments: %s", repository, one.number, exc)
            continue
        before = issue.content_hash
        issue.comments = raw_comments
        issue.save(update_fields=["comments", "synced_at"])
        if issue.content_hash != before:
            changed.add(issue.pk)
    return changed


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
