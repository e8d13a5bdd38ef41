from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from triage import ingest
from triage.models import Issue, Queue
from triage.proposing import queues_to_propose
from triage.tasks import propose_later

if TYPE_CHECKING:
    from argparse import ArgumentParser


class Command(BaseCommand):
    help = "Import issues from a JSON Lines file in GitHub's REST shape; all or nothing."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--repo", default=settings.GITHUB_DEFAULT_REPOSITORY)

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        parsed: list[ingest.IssueFields] = []
        errors: list[str] = []
        first_line: dict[int, int] = {}
        with path.open("rb") as handle:
            for number, raw_line in enumerate(handle, start=1):
                try:
                    line = raw_line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    errors.append(f"line {number}: not valid UTF-8 (at byte {exc.start + 1})")
                    continue
                if not line.strip():
                    continue
                try:
                    fields = ingest.parse(json.loads(line), strict=True)
                except json.JSONDecodeError as exc:
                    errors.append(
                        f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})"
                    )
                    continue
                except RecursionError:
                    errors.append(f"line {number}: nested too deeply to be an issue")
                    continue
                except ingest.IssueFormatError as exc:
                    errors.append(f"line {number}: {exc}")
                    continue
                if fields.number in first_line:
                    errors.append(
                        f"line {number}: issue #{fields.number} already appears on line "
                        f"{first_line[fields.number]}"
                    )
                    continue
                first_line[fields.number] = number
                parsed.append(fields)
        if errors:
            raise CommandError(
                f"{path}: nothing was imported, {len(errors)} malformed line(s):\n"
                + "\n".join(errors)
            )
        created = updated = 0
        to_propose: dict[Queue, list[int]] = defaultdict(list)
        with transaction.atomic():
            for fields in parsed:
                existed = Issue.objects.filter(
                    repository=options["repo"], number=fields.number
                ).exists()
                issue, changed = ingest.upsert(options["repo"], fields)
                if not changed:
                    continue
                if existed:
                    updated += 1
                else:
                    created += 1
                for queue in queues_to_propose(issue):
                    to_propose[queue].append(issue.pk)
            for queue, issue_ids in to_propose.items():
                propose_later(queue, issue_ids)
        self.stdout.write(
            f"{created} new, {updated} updated, {len(parsed) - created - updated} unchanged"
        )
