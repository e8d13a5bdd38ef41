from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from triage import backtest, proposing, tuning
from triage.learning import backtesting, training
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
        "GitHub's REST shape), or against the decisions oncalls made in the console. With "
        "--train or --cv it also scores the learned proposer, alone and beside the rules."
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
            help="rules (default), rules+history (with the queue's stored model), llm or hybrid; "
            "the last two call the Messages API",
        )
        learned = parser.add_argument_group("the learned proposer")
        learned.add_argument(
            "--train",
            type=Path,
            metavar="TRAIN",
            help="train a model on this file and score it on FILE (issues in both are left out "
            "of the scores)",
        )
        learned.add_argument(
            "--cv",
            type=int,
            metavar="K",
            help="K folds of FILE by issue number, each scored by a model trained on the others",
        )
        learned.add_argument(
            "--train-split", help="learn only from the issues of this split (tune or check)"
        )
        learned.add_argument(
            "--train-limit",
            type=int,
            metavar="N",
            help="learn from the N newest training issues only (a learning curve)",
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
        if options["train"] is not None or options["cv"] is not None:
            self.learned(queue, options)
            return
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
            asks_claude = proposer in (Queue.Proposer.LLM, Queue.Proposer.HYBRID)
            if asks_claude and not settings.ANTHROPIC_API_KEY:
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

    def read(self, path: Path, queue: Queue) -> list[backtest.Case]:
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        try:
            return list(backtest.cases_from_file(path, queue))
        except backtest.BacktestInputError as exc:
            raise CommandError(str(exc)) from None

    def learned(self, queue: Queue, options: dict[str, Any]) -> None:
        if options["from_history"]:
            raise CommandError("--train and --cv score files, not --from-history")
        if options["train"] is not None and options["cv"] is not None:
            raise CommandError("give either --train TRAIN FILE or --cv K FILE")
        if options["proposer"] != Queue.Proposer.RULES:
            raise CommandError("--train and --cv score rules, history and rules+history")
        if options["cv"] is not None and options["cv"] < 2:
            raise CommandError("--cv needs at least 2 folds")
        rubric = loader.load(queue.rubric)
        split, limit = options["train_split"], options["train_limit"]
        test = self.read(options["file"], queue)
        note = ""
        try:
            if options["train"] is not None:
                train = [
                    case
                    for case in self.read(options["train"], queue)
                    if split is None or case.split == split
                ]
                train = backtesting.latest(train, limit)
                seen = {case.issue.number for case in train}
                left_out = [case for case in test if case.issue.number in seen]
                test = [case for case in test if case.issue.number not in seen]
                if left_out:
                    note = (
                        f"{len(left_out)} issues of FILE were learned from: left out of the scores"
                    )
                learned_for = backtesting.trained_per_issue(rubric, train, test)
                trained_on = len(train)
            else:
                if split is not None:
                    test = [case for case in test if case.split == split]
                if limit is not None:
                    raise CommandError("--train-limit goes with --train")
                learned_for = backtesting.cross_validated(rubric, test, options["cv"])
                trained_on = len(test) - len(test) // options["cv"]
        except training.TrainingError as exc:
            raise CommandError(f"no model trained: {exc}") from None
        splits = sorted({case.split for case in test}, key=backtest.SPLIT_ORDER.index)
        skip = frozenset(options["skip_label"])
        reports: dict[str, dict[str, backtest.Report]] = {name: {} for name in backtesting.NAMES}
        for test_split in splits:
            cases = [case for case in test if case.split == test_split]
            for name, report in backtesting.score_all(rubric, cases, learned_for, skip).items():
                reports[name][test_split] = report
        mode = (
            {"train": str(options["train"]), "trained_on": trained_on}
            if options["train"] is not None
            else {"cv": options["cv"], "trained_on": trained_on}
        )
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "queue": queue.slug,
                        "rubric_version": rubric.version,
                        **mode,
                        "note": note,
                        "proposers": {
                            name: {split: report.as_dict() for split, report in by_split.items()}
                            for name, by_split in reports.items()
                        },
                    }
                )
            )
            return
        head = (
            f"trained on {trained_on} issues of {options['train']}"
            if options["train"] is not None
            else f"{options['cv']}-fold cross-validation, each model trained on ~{trained_on} issues"
        )
        sections = [
            f"== {name}, split: {split or 'none'} ==\n{backtest.format_text(report)}"
            for name, by_split in reports.items()
            for split, report in by_split.items()
        ]
        self.stdout.write("\n\n".join(sections))
        self.stdout.write("")
        self.stdout.write(head + (f"; {note}" if note else ""))
        self.stdout.write(backtesting.format_comparison(reports))
