"""CSV that is safe to open in a spreadsheet."""

from __future__ import annotations

import json

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
