from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from triage import backtest, proposing, tuning
from triage.models import Queue
from triage.rubric import engine, loader

if TYPE_CHECKING:
    from argparse import ArgumentParser
    from collections.abc import Callable

    from triage.rubric.engine import Draft, IssueInput
    from triage.rubric.loader import Rubric


class Command(BaseCommand):
    help = (
        "Score a queue's rubric against issues with known final labels (a JSON Lines file in "
        "GitHub's REST shape), or against the decisions oncalls made in the console."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--queue", required=True, help="queue slug")
        parser.add_argument("file", nargs="?", type=Path)
        parser.add_argument("--from-history", action="store_true")
        parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
        parser.add_argument(
            "--skip-label",
            action="append",
            default=[],
            metavar="LABEL",
            help="leave this label out of the scores (repeatable), e.g. to see the rules without "
            "a workflow label the history does not carry",
        )
        parser.add_argument(
            "--retire",
            action="append",
            default=[],
            metavar="RULE",
            help="score the rubric without this rule (repeatable), as the report suggests",
        )
        parser.add_argument(
            "--set-confidence",
            action="append",
            default=[],
            metavar="RULE=VALUE",
            help="score the rubric with this rule's confidence (repeatable); "
            "`completion` names the completion",
        )
        parser.add_argument(
            "--proposer",
            choices=[choice.value for choice in Queue.Proposer],
            default=Queue.Proposer.RULES,
            help="rules (default), llm or hybrid; the last two call the Messages API",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            queue = Queue.objects.filter(slug=options["queue"]).first()
        except DatabaseError:
            # The queues are rows made by the first migration: a fresh clone has none yet.
            raise CommandError(
                "the database has no queues yet: run `python manage.py migrate` first"
            ) from None
        if queue is None:
            raise CommandError(f"no queue {options['queue']!r}")
        if options["from_history"] == (options["file"] is not None):
            raise CommandError("give either FILE or --from-history")
        if options["from_history"]:
            cases = list(backtest.cases_from_history(queue))
        else:
            path: Path = options["file"]
            if not path.is_file():
                raise CommandError(f"{path}: no such file")
            try:
                cases = list(backtest.cases_from_file(path, queue))
            except backtest.BacktestInputError as exc:
                raise CommandError(str(exc)) from None
        try:
            edits = [tuning.Edit(rule, retire=True) for rule in options["retire"]] + [
                tuning.parse_confidence(value) for value in options["set_confidence"]
            ]
            rubric = tuning.edited(loader.load(queue.rubric), edits)
        except tuning.EditError as exc:
            raise CommandError(str(exc)) from None
        proposer = options["proposer"]
        propose: Callable[[Rubric, IssueInput], Draft] = engine.propose
        if proposer != Queue.Proposer.RULES:
            if not settings.ANTHROPIC_API_KEY:
                raise CommandError(f"--proposer {proposer} calls Claude: set ANTHROPIC_API_KEY")
            # Scored as the queue would propose in that mode, without touching the queue's row.
            queue.proposer = proposer

            def propose(rubric: Rubric, issue: IssueInput) -> Draft:
                return proposing.draft_for(queue, rubric, issue)

        splits = sorted({case.split for case in cases}, key=backtest.SPLIT_ORDER.index)
        skip = frozenset(options["skip_label"])
        if splits == [""]:
            report = backtest.score(cases, rubric, propose, proposer, skip)
            if options["json"]:
                self.stdout.write(json.dumps(report.as_dict()))
            else:
                self.stdout.write(backtest.format_text(report))
            return
        # A file split into tune and check: each is its own report, so the check split's
        # figures are never mixed with the issues the rules were tuned on.
        reports = {
            split: backtest.score(
                [case for case in cases if case.split == split], rubric, propose, proposer, skip
            )
            for split in splits
        }
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "queue": queue.slug,
                        "rubric_version": rubric.version,
                        "proposer": proposer,
                        "splits": {split: report.as_dict() for split, report in reports.items()},
                    }
                )
            )
        else:
            self.stdout.write(
                "\n\n".join(
                    f"== split: {split or 'none'} ==\n{backtest.format_text(report)}"
                    for split, report in reports.items()
                )
            )
