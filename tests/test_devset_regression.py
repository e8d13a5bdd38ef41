"""The made-up development set as a fast regression check of the three rubrics.

The rubrics are tuned on real issues (`triage/devset/real-index.jsonl`, whose texts stay out of
the repository); this set is written for the project and always at hand, so CI backtests it on
every change. A rule change that costs more than a little here is a regression to look at.
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

DEVSET = Path(__file__).resolve().parent.parent / "triage" / "devset" / "issues.jsonl"

# micro-F1 of the rules on the made-up set when the rubrics were last tuned, less 0.02.
FLOORS = {"pt2": 0.77, "distributed": 0.82, "triage": 0.72}


@pytest.mark.django_db
@pytest.mark.parametrize("queue", sorted(FLOORS))
def test_the_rules_hold_on_the_made_up_set(queue):
    out = StringIO()
    call_command("backtest", "--queue", queue, str(DEVSET), "--json", stdout=out)
    report = json.loads(out.getvalue())

    assert report["issues"] >= 50
    assert report["micro"]["f1"] >= FLOORS[queue], report["micro"]
