"""Judge the decisions taken before reports counted in the database (run once after upgrading)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from triage.models import Decision, Verdict


class Command(BaseCommand):
    help = "Record the verdict of every decision that has none, oldest first."

    def handle(self, *args: Any, **options: Any) -> None:
        missing = (
            Decision.objects.filter(verdict__isnull=True)
            .select_related("proposal__queue")
            .order_by("decided_at", "pk")
        )
        recorded = 0
        # Oldest first, so that each proposal's last decision ends up its current verdict.
        for decision in missing.iterator(chunk_size=500):
            with transaction.atomic():
                Verdict.record(decision)
            recorded += 1
        self.stdout.write(f"Recorded {recorded} verdict{'' if recorded == 1 else 's'}.")
