"""CSV that is safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import json
from typing import TYPE_CHECKING

from django.http import StreamingHttpResponse

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

# A spreadsheet runs a cell starting with one of these as a formula, and issue titles and
# notes are written by anyone.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: object) -> object:
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return f"'{value}"
    return value


def csv_cell(value: object) -> object:
    """One CSV cell of any exported value: lists joined, mappings as JSON, then made safe.

    Every branch ends in `safe_cell`: a label list joined from hostile names is text like any
    other (a label can be named "=HYPERLINK(...)").
    """
    if isinstance(value, list):
        value = "; ".join(str(item) for item in value)
    elif isinstance(value, dict):
        value = json.dumps(value)
    return safe_cell(value)


class _Echo:
    """A file that hands back what is written: csv.writer then yields lines to a response."""

    def write(self, value: str) -> str:
        return value


def streamed_csv(
    filename: str, header: list[str], rows: Iterable[Iterable[object]]
) -> StreamingHttpResponse:
    """A CSV download sent as it is read from the database, in constant memory."""
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow([csv_cell(value) for value in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
