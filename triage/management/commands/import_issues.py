from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from triage import ingest
from triage.models import Queue
from triage.tasks import propose_later

if TYPE_CHECKING:
    from argparse import ArgumentParser
    from collections.abc import Iterator


class Command(BaseCommand):
    help = "Import issues from a JSON Lines file in GitHub's REST shape; all or nothing."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--repo", default=settings.GITHUB_DEFAULT_REPOSITORY)

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        # Two passes over the file, neither holding it: the first checks every line, so that a
        # bad line imports nothing; the second stores the issues in batches, in one transaction.
        errors: list[str] = []
        first_line: dict[int, int] = {}
        total = 0
        for number, parsed in _lines(path):
            if isinstance(parsed, str):
                errors.append(f"line {number}: {parsed}")
            elif parsed.number in first_line:
                errors.append(
                    f"line {number}: issue #{parsed.number} already appears on line "
                    f"{first_line[parsed.number]}"
                )
            else:
                first_line[parsed.number] = number
                total += 1
        if errors:
            raise CommandError(
                f"{path}: nothing was imported, {len(errors)} malformed line(s):\n"
                + "\n".join(errors[:MAX_ERRORS_SHOWN])
                + (
                    f"\n… and {len(errors) - MAX_ERRORS_SHOWN} more"
                    if len(errors) > MAX_ERRORS_SHOWN
                    else ""
                )
            )
        created = updated = 0
        changed_ids: list[int] = []

        def store(batch: list[ingest.IssueFields]) -> None:
            nonlocal created, updated
            for issue, is_new, changed in ingest.upsert_many(options["repo"], batch):
                created += is_new
                updated += changed and not is_new
                if changed:
                    changed_ids.append(issue.pk)

        with transaction.atomic():
            batch: list[ingest.IssueFields] = []
            for _, parsed in _lines(path):
                assert not isinstance(parsed, str)  # the first pass found no error
                batch.append(parsed)
                if len(batch) == BATCH:
                    store(batch)
                    batch = []
            store(batch)
            for queue in Queue.objects.filter(repository=options["repo"]):
                propose_later(queue, changed_ids)
        self.stdout.write(
            f"{created} new, {updated} updated, {total - created - updated} unchanged"
        )


# Issues stored per round trip.
BATCH = 500
MAX_ERRORS_SHOWN = 100


def _lines(path: Path) -> Iterator[tuple[int, ingest.IssueFields | str]]:
    """Each non-blank line's issue, or what is wrong with it."""
    with path.open("rb") as handle:
        for number, raw_line in enumerate(handle, start=1):
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield number, f"not valid UTF-8 (at byte {exc.start + 1})"
                continue
            if not line.strip():
                continue
            try:
                yield number, ingest.parse(json.loads(line), strict=True)
            except json.JSONDecodeError as exc:
                yield number, f"not valid JSON ({exc.msg} at column {exc.colno})"
            except RecursionError:
                yield number, "nested too deeply to be an issue"
            except ingest.IssueFormatError as exc:
                yield number, str(exc)
