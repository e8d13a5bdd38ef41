from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from celery import current_app
from django.core.management.base import BaseCommand, CommandError

from triage.models import Queue
from triage.tasks import sync_history

if TYPE_CHECKING:
    from argparse import ArgumentParser


def _date(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(
            f"--since must be a date (2026-01-31) or an ISO time, got {value!r}"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Read a queue's closed and triaged issues from GitHub, with their final labels, as "
        "labelled examples; incremental from the queue's history cursor."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--queue", required=True, help="the queue's slug")
        parser.add_argument(
            "--since", help="read issues updated since this date instead of since the cursor"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queue = Queue.objects.filter(slug=options["queue"]).first()
        if queue is None:
            raise CommandError(f"no queue {options['queue']!r}")
        since = _date(options["since"]).isoformat() if options["since"] else None
        # With a worker this enqueues the sync; without one (the embedded default) it runs here.
        sync_history.delay(queue.pk, since)
        if not current_app.conf.task_always_eager:
            self.stdout.write(f"{queue.slug}: history sync enqueued; the inbox shows its progress")
            return
        queue.refresh_from_db()
        self.stdout.write(
            f"{queue.slug}: history {queue.history_state}, {queue.history_seen} issues read"
            + (f" ({queue.history_error})" if queue.history_error else "")
        )
