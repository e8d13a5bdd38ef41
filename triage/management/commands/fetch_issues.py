from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError

from triage import github, realindex

if TYPE_CHECKING:
    from argparse import ArgumentParser


class Command(BaseCommand):
    help = (
        "Fill the cache of real issues (.devcache/github/) from GitHub, through the GitHub "
        "module, for every issue of a development index. Needs GITHUB_TOKEN for a useful rate."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("index", type=Path, help="a development index (JSON Lines)")
        parser.add_argument("--repository", default=realindex.REPOSITORY)
        parser.add_argument("--cache", type=Path, default=realindex.CACHE_DIR)
        parser.add_argument(
            "--refresh", action="store_true", help="fetch issues that are cached already"
        )
        parser.add_argument(
            "--max-wait",
            type=float,
            default=3600.0,
            help="the longest rate-limit wait to sit through, in seconds (default 3600)",
        )
        parser.add_argument("--max-attempts", type=int, default=5)

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["index"]
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        numbers = [entry["number"] for entry in realindex.read_index(path)]
        directory: Path = options["cache"] / realindex.GITHUB
        directory.mkdir(parents=True, exist_ok=True)
        fetched = skipped = 0
        failed: list[str] = []
        for number in numbers:
            target = directory / f"{number}.json"
            if target.exists() and not options["refresh"]:
                skipped += 1
                continue
            try:
                issue, comments = self._read(options, number)
            except github.PermanentGitHubError as exc:
                # A deleted or transferred issue: the rest of the index is still worth having.
                failed.append(f"#{number}: {exc}")
                continue
            partial = target.with_suffix(".part")
            partial.write_text(
                json.dumps({"issue": issue, "comments": comments}, ensure_ascii=False),
                encoding="utf-8",
            )
            partial.replace(target)
            fetched += 1
        self.stdout.write(
            f"{fetched} fetched, {skipped} already cached, {len(failed)} failed ({directory})"
        )
        for line in failed:
            self.stderr.write(line)

    def _read(
        self, options: dict[str, Any], number: int
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        for attempt in range(1, options["max_attempts"] + 1):
            try:
                return github.read_issue(options["repository"], number, attempt)
            except github.RetryableGitHubError as exc:
                if attempt == options["max_attempts"] or exc.retry_after > options["max_wait"]:
                    raise CommandError(
                        f"#{number}: {exc}; stopped, run again later to go on"
                    ) from None
                self.stderr.write(f"#{number}: {exc}; waiting {exc.retry_after:.0f} s")
                time.sleep(exc.retry_after)
        raise AssertionError("unreachable")
