"""CSV that is safe to open in a spreadsheet."""

from __future__ import annotations

# A spreadsheet runs a cell starting with one of these as a formula, and issue titles and
# notes are written by anyone.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: object) -> object:
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return f"'{value}"
    return value
