from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand

from triage.models import Queue
from triage.tasks import sync_queue

if TYPE_CHECKING:
    from argparse import ArgumentParser


class Command(BaseCommand):
    help = "Enqueue a sync of every queue (or the named ones) from GitHub."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("queues", nargs="*", help="queue slugs; all when omitted")

    def handle(self, *args: Any, **options: Any) -> None:
        queues = Queue.objects.all()
        if options["queues"]:
            queues = queues.filter(slug__in=options["queues"])
        for queue in queues:
            sync_queue.delay(queue.pk)
            queue.refresh_from_db()
            self.stdout.write(f"{queue.slug}: {queue.sync_state}, {queue.sync_seen} issues read")
