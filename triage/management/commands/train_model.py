from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from triage import backtest
from triage.learning import store, training
from triage.models import Queue

if TYPE_CHECKING:
    from argparse import ArgumentParser


class Command(BaseCommand):
    help = (
        "Train a new version of a queue's learned model: on the database's labelled issues "
        "(read by sync_history or import_issues --labelled, and those whose decision here was "
        "approved), or on a JSON Lines file of issues with their final labels."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--queue", required=True, help="queue slug")
        parser.add_argument("--file", type=Path, help="learn from this file instead")
        parser.add_argument("--split", help="only the file's issues of this split (tune or check)")
        parser.add_argument("--json", action="store_true", help="one JSON object on stdout")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            queue = Queue.objects.filter(slug=options["queue"]).first()
        except DatabaseError:
            raise CommandError(
                "the database has no queues yet: run `python manage.py migrate` first"
            ) from None
        if queue is None:
            raise CommandError(f"no queue {options['queue']!r}")
        path: Path | None = options["file"]
        labelled: list[training.Example] | None = None
        source = store.DATABASE
        if path is not None:
            if not path.is_file():
                raise CommandError(f"{path}: no such file")
            try:
                cases = list(backtest.cases_from_file(path, queue))
            except backtest.BacktestInputError as exc:
                raise CommandError(str(exc)) from None
            if options["split"]:
                cases = [case for case in cases if case.split == options["split"]]
            labelled = [training.Example(case.issue, case.truth) for case in cases]
            source = path.name + (f" ({options['split']})" if options["split"] else "")
        elif options["split"]:
            raise CommandError("--split goes with --file")
        try:
            row, new = store.train(queue, labelled, source)
        except training.TrainingError as exc:
            raise CommandError(f"no model trained: {exc}") from None
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "queue": queue.slug,
                        "version": row.version,
                        "new": new,
                        "examples": row.examples,
                        "labels": row.labels,
                        "metrics": row.metrics,
                    }
                )
            )
            return
        if not new:
            self.stdout.write(
                f"{queue.slug}: model v{row.version} was trained on the same issues; kept it"
            )
            return
        micro = row.metrics["micro"]
        self.stdout.write(
            f"{queue.slug}: model v{row.version} trained on {row.examples} issues in "
            f"{row.metrics['seconds']} s; {len(row.labels)} labels learned; out of fold at 0.5: "
            f"precision {micro['precision']:.3f} recall {micro['recall']:.3f} F1 {micro['f1']:.3f}"
        )
        if row.metrics["not_learned"]:
            too_few = ", ".join(
                f"{label} ({count})" for label, count in sorted(row.metrics["not_learned"].items())
            )
            self.stdout.write(f"not learned (too few issues with or without it): {too_few}")
