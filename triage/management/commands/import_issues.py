from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from triage import ingest
from triage.history.sync import is_labelled, triaged_labels
from triage.models import Issue, Queue
from triage.tasks import find_similar_later, propose_later

if TYPE_CHECKING:
    from argparse import ArgumentParser
    from collections.abc import Iterator


class Command(BaseCommand):
    help = (
        "Import issues from a JSON Lines file in GitHub's REST shape; all or nothing. With "
        "--labelled FILE, the closed and triaged ones are stored as labelled examples, as the "
        "history sync stores them."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", type=Path, nargs="?")
        parser.add_argument(
            "--labelled",
            type=Path,
            metavar="FILE",
            help="a file of past issues whose labels are final (closed, or marked triaged)",
        )
        parser.add_argument("--repo", default=settings.GITHUB_DEFAULT_REPOSITORY)

    def handle(self, *args: Any, **options: Any) -> None:
        if (options["file"] is None) == (options["labelled"] is None):
            raise CommandError("give one file: FILE, or --labelled FILE")
        labelled = options["labelled"] is not None
        path: Path = options["labelled"] if labelled else options["file"]
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
            queues = list(Queue.objects.filter(repository=options["repo"]))
            for queue in queues:
                propose_later(queue, changed_ids)
            find_similar_later(changed_ids)
            examples = _mark_labelled(options["repo"], first_line, queues) if labelled else 0
        self.stdout.write(
            f"{created} new, {updated} updated, {total - created - updated} unchanged"
            + (f"; {examples} labelled examples" if labelled else "")
        )


def _mark_labelled(repository: str, numbers: dict[int, int], queues: list[Queue]) -> int:
    """Mark the file's closed and triaged issues as labelled examples (and the others not:
    an issue reopened since an earlier import is one no more); returns how many are."""
    triaged = frozenset().union(*(triaged_labels(queue) for queue in queues))
    now = timezone.now()
    labelled: list[int] = []
    others: list[int] = []
    wanted = list(numbers)
    for start in range(0, len(wanted), BATCH):
        rows = Issue.objects.filter(
            repository=repository, number__in=wanted[start : start + BATCH]
        ).only("pk", "labels", "state")
        for issue in rows:
            chosen = labelled if is_labelled(issue.labels, issue.state, triaged) else others
            chosen.append(issue.pk)
    for start in range(0, len(labelled), BATCH):
        Issue.objects.filter(pk__in=labelled[start : start + BATCH]).update(labelled_at=now)
    for start in range(0, len(others), BATCH):
        Issue.objects.filter(pk__in=others[start : start + BATCH]).update(labelled_at=None)
    return len(labelled)


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
