from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError

from triage import realindex

if TYPE_CHECKING:
    from argparse import ArgumentParser


class Command(BaseCommand):
    help = (
        "Turn the cached texts of real issues (.devcache/) into the backtest's input "
        f"(.devcache/{realindex.BACKTEST_INPUT}) for the issues of the development index; "
        "--add-new also indexes the cached issues the index lacks."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--index", type=Path, default=realindex.INDEX)
        parser.add_argument("--cache", type=Path, default=realindex.CACHE_DIR)
        parser.add_argument(
            "--add-new",
            action="store_true",
            help="append the cached issues that are not in the index yet (facts only)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        index_path: Path = options["index"]
        cache: Path = options["cache"]
        try:
            cached = realindex.read_cache(cache)
        except (realindex.CacheFormatError, OSError, ValueError, KeyError) as exc:
            raise CommandError(f"the cache cannot be read: {exc}") from None
        index = realindex.read_index(index_path) if index_path.is_file() else []
        if options["add_new"]:
            known = {entry["number"] for entry in index}
            new = [row for row in realindex.index_rows(cached) if row["number"] not in known]
            # Rows already indexed keep their facts and split: the split is made once.
            index = sorted([*index, *new], key=lambda entry: entry["number"])
            realindex.write_jsonl(index_path, index)
            self.stdout.write(f"{index_path}: {len(new)} issues added, {len(index)} in all")
        if not index:
            raise CommandError(f"{index_path}: no index; run with --add-new first")
        output = cache / realindex.BACKTEST_INPUT
        written = realindex.write_jsonl(output, realindex.backtest_rows(index, cached))
        missing = len(index) - written
        self.stdout.write(
            f"{output}: {written} issues"
            + (f"; {missing} indexed issues have no cached text" if missing else "")
        )
