from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from tests.factories import make_issue, make_proposal
from tests.test_reports import RANGE, WEEK_45, decide
from triage import reports, tuning
from triage.models import Queue
from triage.proposing import issue_input
from triage.rubric import engine, loader

pytestmark = pytest.mark.django_db

MARK_DYNAMIC = (
    "Compiling with torch._dynamo.mark_dynamic on the batch recompiles every step; "
    "the symbolic shapes guard fails on the batch size."
)
GRAPH_BREAK = "Compiling this graph-breaks on a dict iteration inside the optimizer step."


@pytest.mark.parametrize(
    ("kept", "fired", "expected"),
    [
        (18, 20, 0.85),  # 19/22
        (0, 30, 0.05),  # 1/32
        (20, 20, 0.95),  # 21/22
        (5, 5, 0.75),  # 6/7 = 0.86, capped: five firings cannot show "high"
    ],
)
def test_a_confidence_is_the_smoothed_share_kept(kept, fired, expected):
    assert tuning.calibrated(kept, fired) == expected


def test_an_edit_changes_only_its_rule_and_names_the_new_rubric():
    rubric = loader.load("pt2")
    retired = tuning.Edit("pt2-graph-break", retire=True).apply(rubric)
    assert "pt2-graph-break" not in {rule.id for rule in retired.rules}
    assert len(retired.rules) == len(rubric.rules) - 1
    assert retired.version == f"{rubric.version}+retire pt2-graph-break"

    surer = tuning.Edit("pt2-graph-break", confidence=0.95).apply(rubric)
    changed = {rule.id: rule.confidence for rule in surer.rules}
    assert changed["pt2-graph-break"] == 0.95
    assert all(
        changed[rule.id] == rule.confidence for rule in rubric.rules if rule.id != "pt2-graph-break"
    )
    assert rubric.completion is not None
    completion = tuning.Edit("completion", confidence=0.9).apply(rubric).completion
    assert completion is not None and completion.confidence == 0.9


def test_an_edit_of_a_rule_the_rubric_lacks_is_refused():
    with pytest.raises(tuning.EditError, match="no rule 'pt2-nope'"):
        tuning.Edit("pt2-nope", retire=True).apply(loader.load("pt2"))
    with pytest.raises(tuning.EditError, match="only have its confidence set"):
        tuning.Edit("completion", retire=True).apply(loader.load("pt2"))


@pytest.mark.parametrize("value", ["pt2-graph-break", "pt2-graph-break=high", "=0.5", "r=1.5"])
def test_a_confidence_edit_is_parsed_strictly(value):
    with pytest.raises(tuning.EditError):
        tuning.parse_confidence(value)


def test_a_retired_rule_no_longer_proposes():
    rubric = loader.load("pt2")
    issue = issue_input(make_issue(number=7))
    assert "pt2-graph-break" in engine.propose(rubric, issue).rules_fired
    retired = tuning.Edit("pt2-graph-break", retire=True).apply(rubric)
    assert "pt2-graph-break" not in engine.propose(retired, issue).rules_fired


def _report_with(*rows: reports.RuleRow, swaps=()) -> reports.Report:
    queue = Queue.objects.get(slug="pt2")
    period = reports.Period.ending(WEEK_45.date(), 90)
    report = reports.Report(queue, period, loader.load("pt2"), decisions=100)
    report.rules = list(rows)
    report.substitutions = list(swaps)
    return report


def test_suggestions_follow_the_counts():
    rubric = loader.load("pt2")
    confidence = {rule.id: rule.confidence for rule in rubric.rules}
    report = _report_with(
        reports.RuleRow("pt2-graph-break", True, fired=40, kept=4),
        reports.RuleRow("pt2-data-dependent", True, fired=30, kept=29),
        reports.RuleRow("pt2-fuzzer", True, fired=6, kept=6),
        reports.RuleRow("pt2-gone", False, fired=50, kept=0),
        swaps=[
            reports.SubstitutionRow("module: dynamo", "module: dynamic shapes", 4),
            reports.SubstitutionRow("module: dynamo", "module: inductor", 2),
        ],
    )
    found = tuning.suggest(report)
    assert [s.edit for s in found.retire] == [tuning.Edit("pt2-graph-break", retire=True)]
    assert found.retire[0].current == confidence["pt2-graph-break"]
    expected = tuning.calibrated(29, 30)
    if expected != confidence["pt2-data-dependent"]:
        assert [s.edit for s in found.recalibrate] == [
            tuning.Edit("pt2-data-dependent", confidence=expected)
        ]
    assert found.too_few == [("pt2-fuzzer", 6)]
    # A rule no longer in the rubric has nothing to edit.
    assert "pt2-gone" not in {s.edit.rule for s in found.retire + found.recalibrate}
    assert [(s.dropped, s.added) for s in found.swaps] == [
        ("module: dynamo", "module: dynamic shapes")
    ]


def test_a_rule_already_calibrated_is_left_alone():
    rubric = loader.load("pt2")
    rule = next(rule for rule in rubric.rules if rule.id == "pt2-graph-break")
    fired = 100
    kept = next(k for k in range(fired + 1) if tuning.calibrated(k, fired) == rule.confidence)
    found = tuning.suggest(_report_with(reports.RuleRow(rule.id, True, fired, kept)))
    assert not found.recalibrate and not found.retire


def test_the_words_of_a_swap_come_from_the_decided_issues(oncall):
    for number in range(1, 4):
        proposal = make_proposal(number=number, body=MARK_DYNAMIC)
        proposal.add_labels = ["module: dynamo", "triaged"]
        proposal.save(update_fields=["add_labels"])
        decide(
            proposal,
            oncall,
            "edit",
            WEEK_45 + timedelta(minutes=number),
            add=["module: dynamic shapes", "triaged"],
        )
    for number in range(11, 14):
        proposal = make_proposal(number=number, body=GRAPH_BREAK)
        proposal.add_labels = ["module: dynamo", "triaged"]
        proposal.save(update_fields=["add_labels"])
        decide(proposal, oncall, "accept", WEEK_45 + timedelta(minutes=number))
    queue = Queue.objects.get(slug="pt2")
    report = reports.build(queue, reports.Period.ending(WEEK_45.date(), 7))
    swap = tuning.Swap("module: dynamo", "module: dynamic shapes", 3)

    told = tuning.telling_words(report, swap)

    assert "recompiles" in told.words_for_added
    assert "iteration" in told.words_for_dropped
    assert not set(told.words_for_added) & set(told.words_for_dropped)
    # Words both sides share tell nothing apart.
    assert "compiling" not in told.words_for_added + told.words_for_dropped


def test_the_report_suggests_retiring_a_rule_humans_undo_with_its_backtest(client, oncall):
    for number in range(1, 23):
        proposal = make_proposal(number=number)
        assert "pt2-graph-break" in str(proposal.citations)
        kind = "accept" if number == 1 else "reject"
        decide(proposal, oncall, kind, WEEK_45 + timedelta(minutes=number))
    client.force_login(oncall)

    response = client.get(reverse("report", args=["pt2"]), RANGE | {"backtest": "1"})

    page = response.content.decode()
    assert 'id="suggested-edits"' in page
    row = page[page.index('id="suggest-pt2-graph-break"') :].split("</tr>")[0]
    assert "Retire <code>pt2-graph-break</code>" in row
    assert "<td>22</td><td>1</td>" in row
    assert "--retire pt2-graph-break" in row
    suggestions = response.context["suggestions"]
    retired = suggestions.retire[0]
    # Rejected proposals: proposing nothing matches 21 of the 22 decisions instead of one.
    assert retired.after is not None and suggestions.before is not None
    assert (suggestions.before.exact, retired.after.exact) == (1, 21)
    assert "1 → 21 of 22" in row
    assert suggestions.backtested == 22


def test_backtest_scores_the_rubric_with_an_edit(oncall):
    for number in range(1, 4):
        decide(make_proposal(number=number), oncall, "reject", WEEK_45)

    def run(*args: str) -> dict[str, Any]:
        out = io.StringIO()
        call_command("backtest", "--queue", "pt2", "--from-history", "--json", *args, stdout=out)
        answer: dict[str, Any] = json.loads(out.getvalue())
        return answer

    as_is = run()
    retired = run("--retire", "pt2-graph-break")
    assert "pt2-graph-break" in as_is["rules"]
    assert "pt2-graph-break" not in retired["rules"]
    assert retired["rubric_version"].endswith("+retire pt2-graph-break")
    surer = run("--set-confidence", "pt2-graph-break=0.95", "--set-confidence", "completion=0.95")
    assert surer["tiers"]["high"]["issues"] == 3
    with pytest.raises(CommandError, match="no rule 'pt2-nope'"):
        run("--retire", "pt2-nope")
    with pytest.raises(CommandError, match="RULE=VALUE"):
        run("--set-confidence", "pt2-graph-break")
