from __future__ import annotations

import csv
import html
import io
import json
import re
import xml.etree.ElementTree as ET
from datetime import UTC, date, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tests.factories import make_proposal
from triage import charts, outbox, reports
from triage.models import Decision, Proposal, Queue, Verdict, Write

pytestmark = pytest.mark.django_db

DYNAMIC_FALSE = "It works with dynamic=False.\n```python\nimport torch\n```"
SEGFAULT = "Segmentation fault (core dumped)"
VAGUE = (
    "It is broken, please help. My model fails somewhere inside torch.compile after a few "
    "steps, on every machine we tried, with every nightly of the last month. I can't share "
    "the code or the model, and I have not managed to make it any smaller yet."
)
CPU_ONLY = "aot_eager: passes\ninductor: fails\nOnly on CPU.\n```python\nimport torch\n```"
RANGE = {"start": "2026-11-02", "end": "2026-11-15"}  # ISO weeks 45 and 46 of 2026
WEEK_45 = datetime(2026, 11, 3, 10, 0, tzinfo=UTC)
WEEK_46 = datetime(2026, 11, 10, 10, 0, tzinfo=UTC)


def decide(proposal, user, kind, at, *, add=None, remove=None, comment=None, note=""):
    rejected = kind == "reject"
    decision = outbox.decide(
        proposal,
        kind=kind,
        user=user,
        add_labels=add if add is not None else [] if rejected else list(proposal.add_labels),
        remove_labels=(
            remove if remove is not None else [] if rejected else list(proposal.remove_labels)
        ),
        comment_body=comment if comment is not None else "" if rejected else proposal.comment_body,
        close=False,
        note=note,
    )
    assert decision is not None
    backdate(decision, at)
    decision.refresh_from_db()
    return decision


def backdate(decision, at):
    # The verdict keeps a copy of the time, for the report's index.
    Decision.objects.filter(pk=decision.pk).update(decided_at=at)
    Verdict.objects.filter(decision=decision).update(decided_at=at)


def cite(proposal, *rules):
    """Make a recorded proposal cite these rule ids (as an older rubric's proposal would)."""
    proposal.citations = [
        {"section": "component-isolation", "section_title": "x", "rule": rule, "evidence": ""}
        | {"source": "", "start": 0, "end": 0}
        for rule in rules
    ]
    proposal.save(update_fields=["citations"])


@pytest.fixture
def history(oncall):
    """Eight pt2 decisions in weeks 45 and 46, one distributed decision, two pt2 decisions
    outside the range.

    | | proposed | decision | outcome |
    | a | dynamo, triaged (+ a retired rule) | accept | accepted |
    | b | dynamo, triaged (an older rubric) | edit: dynamic shapes, triaged | edited |
    | c | dynamic shapes, triaged (high) | edit, nothing changed | accepted |
    | d | dynamo, triage review (low) | escalate | escalated |
    | i | dynamo, triaged | edit: dynamic shapes, triaged | edited |
    | j | dynamo, triaged | edit: inductor, triaged (write conflicted) | edited |
    | e | cpu inductor redirect (high) | reject | rejected |
    | f | needs reproduction (low) | edit: + inductor | edited |
    """
    d = SimpleNamespace()
    a = make_proposal(number=1)
    cite(a, "pt2-graph-break", "completion", "pt2-retired-rule")
    d.a = decide(a, oncall, "accept", WEEK_45)

    # An older rubric proposed dynamo for a dynamic=False issue; the current one gets it right.
    b = make_proposal(number=2, body=DYNAMIC_FALSE)
    assert b.add_labels == ["module: dynamic shapes", "triaged"]
    b.add_labels, b.tier, b.rubric_version = ["module: dynamo", "triaged"], "medium", "0ld"
    b.save(update_fields=["add_labels", "tier", "rubric_version"])
    cite(b, "pt2-graph-break", "completion", "pt2-retired-rule")
    d.b = decide(
        b,
        oncall,
        "edit",
        WEEK_45 + timedelta(minutes=1),
        add=["module: dynamic shapes", "triaged"],
        note="dynamic=False fixes it: <dynamic shapes>",
    )

    c = make_proposal(number=3, body=DYNAMIC_FALSE)
    # Scored as a rubric did before `triaged` capped the confidence of a completed triage.
    c.tier = "high"
    c.save(update_fields=["tier"])
    d.c = decide(c, oncall, "edit", WEEK_45 + timedelta(minutes=2), add=list(c.add_labels))

    proposal = make_proposal(number=4, body=SEGFAULT)
    assert proposal.add_labels == ["module: dynamo", "triage review"]
    d.d = decide(proposal, oncall, "escalate", WEEK_45 + timedelta(minutes=3), note="HF model")

    proposal = make_proposal(number=5)
    d.i = decide(
        proposal, oncall, "edit", WEEK_46, add=["module: dynamic shapes", "triaged"], note="SymInt"
    )
    proposal = make_proposal(number=6)
    d.j = decide(
        proposal,
        oncall,
        "edit",
        WEEK_46 + timedelta(minutes=1),
        add=["module: inductor", "triaged"],
        note="codegen",
    )
    Write.objects.filter(decision=d.j).update(state=Write.State.CONFLICT)

    proposal = make_proposal(number=7, title="[CPU] layernorm fails", body=CPU_ONLY)
    # As an older rubric proposed it: the redirect then took `oncall: pt2` away.
    proposal.add_labels, proposal.remove_labels = ["oncall: cpu inductor"], ["oncall: pt2"]
    proposal.tier = "high"
    proposal.save(update_fields=["add_labels", "remove_labels", "tier"])
    cite(proposal, "pt2-cpu-inductor-redirect")
    d.e = decide(proposal, oncall, "reject", WEEK_46 + timedelta(minutes=2), note="CUDA too")

    proposal = make_proposal(number=8, title="Something odd", body=VAGUE)
    assert proposal.add_labels == ["needs reproduction"] and proposal.tier == "low"
    d.f = decide(
        proposal,
        oncall,
        "edit",
        WEEK_46 + timedelta(minutes=3),
        add=["needs reproduction", "module: inductor"],
    )

    proposal = make_proposal(
        "distributed",
        number=20,
        title="allreduce hangs",
        body="NCCL timeout in allreduce",
        labels=("oncall: distributed",),
    )
    d.g = decide(proposal, oncall, "accept", WEEK_46 + timedelta(days=1))

    d.before = decide(
        make_proposal(number=30), oncall, "accept", datetime(2026, 10, 20, tzinfo=UTC)
    )
    d.after = decide(make_proposal(number=31), oncall, "reject", WEEK_46 + timedelta(days=7))
    return d


def build(**params):
    period = reports.parse_period(RANGE | params, date(2026, 11, 22))
    return reports.build(Queue.objects.get(slug="pt2"), period)


def page(client, name="report", slug="pt2", **params):
    response = client.get(reverse(name, args=[slug]), RANGE | params)
    assert response.status_code == 200, response.content
    return response


def element(pattern, body):
    found = re.search(pattern, body, re.S)
    assert found is not None, pattern
    return found.group(0)


def listed(response):
    return sorted(j.decision.pk for j in response.context["listed"])


def pks(*decisions):
    return sorted(d.pk for d in decisions)


def counted(queue="pt2", today=date(2026, 11, 22), **params):
    """The decisions a report of the range counts."""
    period = reports.parse_period(RANGE | params, today)
    return sorted(d.pk for d in reports.judgements(Queue.objects.get(slug=queue), period))


# The numbers ----------------------------------------------------------------------------------


def test_outcomes_count_exact_edits_as_accepted(history):
    report = build()
    assert report.decisions == 8
    assert [(row.kind, row.decisions) for row in report.kinds] == [
        ("accepted", 2),
        ("edited", 4),
        ("escalated", 1),
        ("rejected", 1),
    ]
    assert [row.share for row in report.kinds] == [2 / 8, 4 / 8, 1 / 8, 1 / 8]


def test_rules_fired_and_kept(history):
    report = build()
    assert [(row.rule, row.in_rubric, row.fired, row.kept) for row in report.rules] == [
        # The completion step's `triaged` was approved every time it was proposed.
        ("completion", True, 5, 5),
        # Dynamo proposed on a, b, d, i, j; humans kept it on a and d only.
        ("pt2-graph-break", True, 5, 2),
        # No longer in the rubric: judged on the whole proposal (a kept, b not).
        ("pt2-retired-rule", False, 2, 1),
        # A rejection keeps nothing.
        ("pt2-cpu-inductor-redirect", True, 1, 0),
        ("pt2-crash-escalation", True, 1, 1),
        ("pt2-dynamic-false-fixes", True, 1, 1),
        ("pt2-request-repro", True, 1, 1),
    ]


def test_labels_precision_and_recall(history):
    report = build()
    rows = {row.label: row for row in report.labels}
    assert [row.label for row in report.labels] == [
        "triaged",
        "module: dynamo",
        "module: dynamic shapes",
        "module: inductor",
        "needs reproduction",
        "triage review",
        "oncall: cpu inductor",
    ]
    expected = {
        # label: proposed, approved, kept, precision, recall
        "triaged": (5, 5, 5, 1.0, 1.0),
        "module: dynamo": (5, 2, 2, 2 / 5, 1.0),
        "module: dynamic shapes": (1, 3, 1, 1.0, 1 / 3),
        "module: inductor": (0, 2, 0, None, 0.0),
        "needs reproduction": (1, 1, 1, 1.0, 1.0),
        "triage review": (1, 1, 1, 1.0, 1.0),
        # The rejection approved nothing.
        "oncall: cpu inductor": (1, 0, 0, 0.0, None),
    }
    for label, numbers in expected.items():
        row = rows[label]
        assert (row.proposed, row.approved, row.kept, row.precision, row.recall) == numbers, label


def test_substitutions_most_frequent_first(history):
    report = build()
    assert [(row.dropped, row.added, row.decisions) for row in report.substitutions] == [
        ("module: dynamo", "module: dynamic shapes", 2),
        ("module: dynamo", "module: inductor", 1),
    ]


def test_tiers_share_accepted_as_proposed(history):
    report = build()
    assert [(row.tier, row.decisions, row.accepted, row.share) for row in report.tiers] == [
        ("high", 2, 1, 0.5),
        # d (a crash escalation, 0.45 since the real-issue tuning) and f are low.
        ("medium", 4, 1, 0.25),
        ("low", 2, 0, 0.0),
    ]


def test_weekly_series_covers_every_queue(history):
    report = build()
    series = {
        queue: [(row.week, row.decisions, row.accepted, row.share) for row in rows]
        for queue, rows in report.week_series().items()
    }
    assert series == {
        "pt2": [("2026-W45", 4, 2, 0.5), ("2026-W46", 4, 0, 0.0)],
        "distributed": [("2026-W45", 0, 0, None), ("2026-W46", 1, 1, 1.0)],
        "triage": [("2026-W45", 0, 0, None), ("2026-W46", 0, 0, None)],
    }


def test_the_latest_decision_of_a_proposal_counts(history, oncall):
    # decide() allows one decision a proposal; a second one (after an undo) replaces it.
    again = Decision.objects.create(
        proposal=history.a.proposal,
        kind="reject",
        decided_by=oncall,
        decided_at=WEEK_45 + timedelta(hours=1),
        note="on second thoughts",
    )
    Verdict.record(again)
    assert history.a.pk not in counted()
    report = build()
    assert report.decisions == 8
    assert {row.kind: row.decisions for row in report.kinds}["rejected"] == 2


def test_the_date_range_filters_decisions(history):
    report = build(start="2026-11-03", end="2026-11-03")
    assert report.decisions == 4
    assert counted(start="2026-11-03", end="2026-11-03") == pks(
        history.a, history.b, history.c, history.d
    )
    assert [row.week for row in report.weeks if row.queue == "pt2"] == ["2026-W45"]
    # The days are the server's: 23:30 UTC on the 3rd is the 4th in Tokyo.
    backdate(history.a, WEEK_45.replace(hour=23, minute=30))
    with timezone.override("Asia/Tokyo"):
        assert counted(start="2026-11-04", end="2026-11-04") == [history.a.pk]
        report = build(start="2026-11-04", end="2026-11-04")
    assert report.decisions == 1
    assert [(row.week, row.decisions) for row in report.weeks if row.queue == "pt2"] == [
        ("2026-W45", 1)
    ]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"start": "2026-11-31"}, "is not a date"),
        ({"start": "20261101"}, "YYYY-MM-DD"),
        ({"end": "2026-W46-1"}, "YYYY-MM-DD"),
        ({"start": "2026-11-10", "end": "2026-11-01"}, "after it ends"),
        ({"end": "2026-11-23"}, "cannot end after today"),
        ({"start": "2020-01-01"}, "at most 731 days"),
    ],
)
def test_bad_ranges_are_refused(params, message):
    with pytest.raises(reports.ReportInputError, match=message):
        reports.parse_period(RANGE | params, date(2026, 11, 22))


def test_the_default_range_is_the_last_28_days(client, viewer, oncall):
    now = timezone.now()
    recent = decide(make_proposal(number=1), oncall, "accept", now - timedelta(days=1))
    decide(make_proposal(number=2), oncall, "accept", now - timedelta(days=28))
    client.force_login(viewer)
    response = client.get(reverse("report", args=["pt2"]))
    report = response.context["report"]
    assert report.period == reports.Period(
        timezone.localdate() - timedelta(days=27), timezone.localdate()
    )
    assert report.decisions == 1
    assert counted(today=timezone.localdate(), **report.period.params()) == [recent.pk]
    assert reports.parse_period({}, date(2026, 11, 22)) == reports.Period(
        date(2026, 10, 26), date(2026, 11, 22)
    )
    assert reports.parse_period({"end": "2026-11-01"}, date(2026, 11, 22)).start == date(
        2026, 10, 5
    )


# The pages ------------------------------------------------------------------------------------


def test_the_page_shows_every_table_and_chart(client, viewer, history):
    client.force_login(viewer)
    body = page(client).content.decode()
    for section in ("outcomes", "over-time", "tiers", "rules", "labels", "substitutions"):
        assert f'id="{section}"' in body
    assert body.count("<svg") == 2
    assert 'class="list heat-map"' in body
    assert 'pt2-retired-rule</code> <span class="muted">not in the current rubric' in body
    for table in reports.TABLES:
        assert f"format=csv&amp;table={table}" in body
    # Every chart is well-formed XML: nothing a label or name holds escaped it.
    for svg in re.findall(r"<svg.*?</svg>", body, re.S):
        ET.fromstring(svg)
    ET.fromstring(element(r'<table class="list heat-map".*?</table>', body))


def test_a_queue_without_decisions_has_an_empty_report(client, viewer, history):
    client.force_login(viewer)
    response = page(client, slug="triage")
    body = response.content.decode()
    assert response.context["report"].decisions == 0
    assert "0 decisions</a>" in body
    assert "No rule fired" in body
    assert 'id="no-substitutions"' in body
    backtest = page(client, slug="triage", backtest="1").content.decode()
    assert "No decision to backtest in this range." in backtest
    # Its line has no point; the other queues' are still drawn.
    assert body.count("<circle") == 3


def test_a_bad_range_shows_the_default_with_a_message(client, viewer, history):
    client.force_login(viewer)
    response = client.get(reverse("report", args=["pt2"]), {"start": "yesterday"})
    assert response.status_code == 200
    assert response.context["report"].period == reports.Period.ending(timezone.localdate())
    body = response.content.decode()
    assert 'id="report-error"' in body
    assert "start must be a date written YYYY-MM-DD" in body
    assert "Showing the last 28 days instead." in body


def figure_links(body):
    """(drill-down URL, the number it shows) for every linked figure of the report."""
    links = re.findall(
        r'<a href="(/reports/[\w-]+/decisions/\?[^"]*)"[^>]*>(?:<span title="[^"]*">)?(\d+)<', body
    )
    return [(html.unescape(url), int(number)) for url, number in links]


def test_every_figure_lists_exactly_the_decisions_behind_it(client, viewer, history):
    client.force_login(viewer)
    body = page(client).content.decode()
    links = figure_links(body)
    # 4 outcomes, 3 queues by 2 weeks, 3 tiers by 2, 7 rules by 3, 7 labels by 5, substitutions: 2 in
    # the matrix and 2 in the table.
    assert len(links) == 4 + 6 + 6 + 21 + 35 + 4
    for url, number in links:
        response = client.get(url)
        assert response.status_code == 200, url
        assert len(response.context["listed"]) == number, url


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, "abcdijef"),
        ({"kind": "accepted"}, "ac"),
        ({"kind": "edited"}, "bijf"),
        ({"rule": "pt2-graph-break"}, "abdij"),
        ({"rule": "pt2-graph-break", "kept": "no"}, "bij"),
        ({"rule": "pt2-retired-rule", "kept": "yes"}, "a"),
        ({"label": "module: dynamo", "side": "dropped"}, "bij"),
        ({"label": "module: dynamic shapes", "side": "added"}, "bi"),
        ({"label": "module: inductor"}, "jf"),
        ({"dropped": "module: dynamo", "added": "module: dynamic shapes"}, "bi"),
        ({"tier": "high", "kind": "accepted"}, "c"),
        ({"tier": "high"}, "ce"),
        ({"start": "2026-11-09"}, "ijef"),
    ],
)
def test_the_drill_down_filters(client, viewer, history, params, expected):
    client.force_login(viewer)
    response = page(client, "report-decisions", **params)
    assert listed(response) == pks(*(getattr(history, name) for name in expected))


def test_the_drill_down_shows_issue_proposal_change_and_note(client, viewer, history):
    client.force_login(viewer)
    response = page(
        client, "report-decisions", dropped="module: dynamo", added="module: dynamic shapes"
    )
    body = response.content.decode()
    assert [j.decision.pk for j in response.context["listed"]] == [history.i.pk, history.b.pk]
    row = element(rf'<tr id="decision-{history.b.pk}">.*?</tr>', body)
    issue = history.b.proposal.issue
    assert f'href="{reverse("history", args=[issue.pk])}">#2</a> {issue.title}' in row
    assert "+ module: dynamo" in row  # proposed
    assert "+ module: dynamic shapes" in row  # approved
    assert "human added module: dynamic shapes" in row
    assert "human dropped module: dynamo" in row
    assert "dynamic=False fixes it: &lt;dynamic shapes&gt;" in row
    assert "by oncall" in row
    assert "proposed module: dynamo and added module: dynamic shapes" not in body
    assert "the human dropped module: dynamo and added module: dynamic shapes" in body

    rejected = page(client, "report-decisions", kind="rejected").content.decode()
    assert "nothing: rejected" in rejected
    assert "CUDA too" in rejected


def test_the_drill_down_refuses_malformed_filters(client, viewer):
    client.force_login(viewer)
    url = reverse("report-decisions", args=["pt2"])
    for params in ({"kind": "accept"}, {"tier": "top"}, {"kept": "yes"}, {"dropped": "x"}):
        assert client.get(url, params).status_code == 400, params


def read_csv(response):
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith("attachment; filename=")
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return list(csv.reader(io.StringIO(body.decode())))


def test_csv_of_every_table(client, viewer, history):
    client.force_login(viewer)
    url = reverse("report", args=["pt2"])

    def table(name):
        return read_csv(client.get(url, RANGE | {"format": "csv", "table": name}))

    kinds = table("kinds")
    assert kinds[0] == ["outcome", "decisions", "share"]
    assert kinds[1:] == [
        ["accepted", "2", "0.2500"],
        ["edited", "4", "0.5000"],
        ["escalated", "1", "0.1250"],
        ["rejected", "1", "0.1250"],
    ]
    rules = table("rules")
    assert rules[0] == ["rule", "in_current_rubric", "fired", "kept", "kept_share"]
    assert ["pt2-retired-rule", "False", "2", "1", "0.5000"] in rules
    labels = table("labels")
    assert labels[0] == ["label", "proposed", "approved", "kept", "precision", "recall"]
    assert ["module: dynamo", "5", "2", "2", "0.4000", "1.0000"] in labels
    assert ["module: inductor", "0", "2", "0", "", "0.0000"] in labels
    assert table("substitutions") == [
        ["dropped", "added", "decisions"],
        ["module: dynamo", "module: dynamic shapes", "2"],
        ["module: dynamo", "module: inductor", "1"],
    ]
    assert table("tiers")[1:] == [
        ["high", "2", "1", "0.5000"],
        ["medium", "4", "1", "0.2500"],
        ["low", "2", "0", "0.0000"],
    ]
    weeks = table("weeks")
    assert weeks[0] == ["queue", "week", "monday", "decisions", "accepted_as_proposed", "share"]
    assert weeks[1:3] == [
        ["pt2", "2026-W45", "2026-11-02", "4", "2", "0.5000"],
        ["pt2", "2026-W46", "2026-11-09", "4", "0", "0.0000"],
    ]
    assert ["distributed", "2026-W45", "2026-11-02", "0", "0", ""] in weeks


def test_csv_refuses_what_it_cannot_honour(client, viewer):
    client.force_login(viewer)
    url = reverse("report", args=["pt2"])
    assert client.get(url, {"format": "csv", "table": "nope"}).status_code == 400
    bad_range = client.get(url, {"format": "csv", "table": "kinds", "start": "2026-13-01"})
    assert bad_range.status_code == 400
    assert b"is not a date" in bad_range.content
    assert client.get(url, {"format": "xml"}).status_code == 400


def test_the_drill_down_exports_csv_safe_for_spreadsheets(client, viewer, history):
    Decision.objects.filter(pk=history.f.pk).update(note="=HYPERLINK(evil)")
    client.force_login(viewer)
    response = client.get(
        reverse("report-decisions", args=["pt2"]), RANGE | {"kind": "edited", "format": "csv"}
    )
    rows = read_csv(response)
    assert rows[0][:4] == ["decision_id", "decided_at", "decided_by", "outcome"]
    assert sorted(int(row[0]) for row in rows[1:]) == pks(
        history.b, history.i, history.j, history.f
    )
    notes = {int(row[0]): row[-1] for row in rows[1:]}
    assert notes[history.f.pk] == "'=HYPERLINK(evil)"


# What would change ----------------------------------------------------------------------------


def test_what_would_change_backtests_the_current_rubric(history):
    changes = reports.what_would_change(build())
    # j's write conflicted: left out, as backtest --from-history leaves it out.
    assert (changes.decisions, changes.left_out) == (7, 1)
    # As made: tp a2 b1 i1 c2 d2 f1 = 9; fp b, i (dynamo), e (cpu inductor) = 3;
    # fn b, i (dynamic shapes), e (oncall: pt2 stays), f (inductor) = 4.
    assert changes.recorded.precision == pytest.approx(9 / 12)
    assert changes.recorded.recall == pytest.approx(9 / 13)
    assert changes.recorded.f1 == pytest.approx(18 / 25)
    assert changes.recorded.exact == 3  # a, c, d
    # The current rubric proposes dynamic shapes for b, and keeps `oncall: pt2` on e while
    # adding `triaged` there: fp i (dynamo), e (cpu inductor, triaged); fn i, f.
    assert changes.current.precision == pytest.approx(10 / 13)
    assert changes.current.recall == pytest.approx(10 / 12)
    assert changes.current.f1 == pytest.approx(20 / 25)
    assert changes.current.exact == 4
    assert [j.decision.pk for j in changes.fixed] == [history.b.pk]
    assert changes.broken == []
    assert "0ld" in changes.rubric_versions_seen


def test_what_would_change_agrees_with_backtest_from_history(history, capsys):
    changes = reports.what_would_change(build(start="2026-10-01", end="2026-11-22"))
    call_command("backtest", "--queue", "pt2", "--from-history", "--json")
    backtested = json.loads(capsys.readouterr().out)
    assert changes.decisions == backtested["issues"] == 9
    assert round(changes.current.precision, 4) == backtested["micro"]["precision"]
    assert round(changes.current.recall, 4) == backtested["micro"]["recall"]
    assert round(changes.current.f1, 4) == backtested["micro"]["f1"]


def test_the_page_loads_what_would_change_after_itself(client, viewer, history):
    client.force_login(viewer)
    body = page(client).content.decode()
    text = element(r'<section class="card" id="what-would-change">.*?</section>', body)
    # htmx asks for the backtest once the page is there; without JavaScript it is a link.
    assert 'hx-get="?start=2026-11-02&amp;end=2026-11-15&amp;backtest=1"' in text
    assert 'href="?start=2026-11-02&amp;end=2026-11-15&amp;backtest=1#what-would-change"' in text
    assert "<td>" not in text
    fragment = client.get(
        reverse("report", args=["pt2"]), RANGE | {"backtest": "1"}, headers={"HX-Request": "true"}
    ).content.decode()
    assert fragment.strip().startswith('<section class="card" id="what-would-change">')
    assert "<html" not in fragment
    assert "<td>0.750</td><td>0.692</td><td>0.720</td><td>3 of 7</td>" in fragment


def test_the_page_shows_what_would_change(client, viewer, history):
    client.force_login(viewer)
    body = page(client, backtest="1").content.decode()
    text = element(r'<section class="card" id="what-would-change">.*?</section>', body)
    assert "<td>0.750</td><td>0.692</td><td>0.720</td><td>3 of 7</td>" in text
    assert "<td>0.769</td><td>0.833</td><td>0.800</td><td>4 of 7</td>" in text
    assert f'href="{reverse("history", args=[history.b.proposal.issue_id])}">#2</a>' in text
    assert "1 decision whose write conflicted" in text


# Charts ---------------------------------------------------------------------------------------

NASTY = "<script>alert('x')</script> & \"quoted\""


def test_charts_escape_every_text():
    line = charts.line_chart(
        NASTY,
        [NASTY, "W02"],
        [charts.Series(NASTY, [charts.Point(0.5, NASTY, "/x?a=1&b=<2>"), charts.Point(None, "")])],
    )
    bars = charts.bar_chart(NASTY, [charts.Bar(NASTY, 0.25, NASTY, NASTY, "/x?a=1&b=2")])
    heat = charts.heat_map(NASTY, [NASTY], [NASTY], {(NASTY, NASTY): charts.Cell(3, NASTY, "/")})
    for markup in (line, bars, heat):
        assert "<script>" not in markup
        root = ET.fromstring(markup)
        texts = [node.text for node in root.iter() if node.text]
        assert NASTY in texts
    assert 'href="/x?a=1&amp;b=&lt;2&gt;"' in line


def test_a_line_breaks_where_a_week_has_no_decisions():
    points = [charts.Point(v, "") for v in (0.5, 1.0, None, 0.0)]
    svg = charts.line_chart("t", ["a", "b", "c", "d"], [charts.Series("s", points)])
    assert svg.count("<polyline") == 1
    assert svg.count("<circle") == 3


def test_queue_names_are_escaped_on_the_page(client, viewer, history):
    Queue.objects.filter(slug="distributed").update(name='Dist <b>"&"</b>')
    client.force_login(viewer)
    body = page(client).content.decode()
    assert "<b>" not in body
    assert "Dist &lt;b&gt;&quot;&amp;&quot;&lt;/b&gt;" in body


# Who may read, and what it costs ----------------------------------------------------------------


def test_anonymous_users_are_sent_to_log_in(client):
    for name in ("report", "report-decisions"):
        response = client.get(reverse(name, args=["pt2"]))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


def test_viewers_and_oncalls_may_read(client, viewer, oncall, history):
    for user in (viewer, oncall):
        client.force_login(user)
        for name in ("report", "report-decisions"):
            assert client.get(reverse(name, args=["pt2"])).status_code == 200


def test_an_unknown_queue_is_404(client, viewer):
    client.force_login(viewer)
    for name in ("report", "report-decisions"):
        assert client.get(reverse(name, args=["nope"])).status_code == 404


def count_queries(client, name, **params):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse(name, args=["pt2"]), RANGE | params)

    assert response.status_code == 200
    on_decisions = [q for q in queries if 'FROM "triage_decision"' in q["sql"]]
    return len(queries), len(on_decisions)


def test_the_pages_run_a_constant_number_of_queries(client, viewer, oncall):
    client.force_login(viewer)
    decide(make_proposal(number=1), oncall, "accept", WEEK_45)
    small = count_queries(client, "report")
    small_backtest = count_queries(client, "report", backtest="1")
    small_drill = count_queries(client, "report-decisions", kind="accepted")
    small_csv = count_queries(client, "report", format="csv", table="labels")
    for number in range(2, 30):
        proposal = make_proposal(number=number, body=DYNAMIC_FALSE if number % 2 else SEGFAULT)
        kind = ("accept", "edit", "escalate", "reject")[number % 4]
        add = ["module: inductor"] if kind == "edit" else None
        decide(proposal, oncall, kind, WEEK_46, add=add, note="n")
    assert Proposal.objects.filter(status="decided").count() == 29
    large = count_queries(client, "report")
    assert small == large
    # The tables are counted over verdicts: no decision is read.
    assert large[1] == 0
    # The backtest, loaded after the page, reads the latest decisions in one query; each label
    # swap it suggests (at most tuning.SWAPS_SHOWN) reads its two sides' issues.
    swaps = (
        client.get(reverse("report", args=["pt2"]), RANGE | {"backtest": "1"})
        .context["suggestions"]
        .swaps
    )
    assert len(swaps) == 2
    assert count_queries(client, "report", backtest="1") == (
        small_backtest[0] + 2 * len(swaps),
        small_backtest[1] + 2 * len(swaps),
    )
    assert small_backtest[1] == 1
    assert small_drill == count_queries(client, "report-decisions", kind="accepted")
    # The page and the count are found among the verdicts; the decisions shown, in one query.
    assert small_drill[1] == 1
    assert small_csv == count_queries(client, "report", format="csv", table="labels")


def test_a_heat_map_with_an_empty_cell_renders():
    # Any substitution matrix with a gap crashed the report page (format_html without args).
    cells = {("module: dynamo", "module: inductor"): charts.Cell(2, "2 decisions", "/x")}
    html = charts.heat_map(
        "Substitutions",
        ["module: dynamo", "module: dynamic shapes"],
        ["module: inductor", "triaged"],
        cells,
    )
    assert html.count("<td></td>") == 3
    ET.fromstring(html)


def test_the_report_links_the_exports_of_every_decision(client, viewer):
    client.force_login(viewer)
    html = client.get(reverse("report", args=["pt2"])).content.decode()
    assert reverse("export-decisions", args=["csv"]) in html
    assert reverse("export-decisions", args=["jsonl"]) in html


def test_the_drill_down_pages_by_key_newest_first(client, viewer, history, settings):
    settings.TRIAGE_PAGE_SIZE = 3
    client.force_login(viewer)
    url = reverse("report-decisions", args=["pt2"])
    seen = []
    response = client.get(url, RANGE)
    assert response.context["total"] == 8
    while True:
        seen += [j.decision.pk for j in response.context["listed"]]
        before = response.context["next_before"]
        if before is None:
            break
        response = client.get(url, RANGE | {"before": before})
    assert seen == [
        d.pk
        for d in sorted(
            [
                history.a,
                history.b,
                history.c,
                history.d,
                history.i,
                history.j,
                history.e,
                history.f,
            ],
            key=lambda d: (d.decided_at, d.pk),
            reverse=True,
        )
    ]


@pytest.mark.parametrize("params", [{"before": "x"}, {"before": "99999"}, {"format": "xls"}])
def test_a_bad_drill_down_page_is_a_bad_request(client, viewer, history, params):
    client.force_login(viewer)
    response = client.get(reverse("report-decisions", args=["pt2"]), RANGE | params)
    assert response.status_code == 400


def test_record_verdicts_judges_the_decisions_taken_before_the_upgrade(history):
    before = build()
    Verdict.objects.all().delete()
    assert build().decisions == 0
    out = io.StringIO()
    call_command("record_verdicts", stdout=out)
    assert out.getvalue().strip() == f"Recorded {Decision.objects.count()} verdicts."
    after = build()
    assert (after.decisions, after.kinds, after.rules, after.labels, after.tiers) == (
        before.decisions,
        before.kinds,
        before.rules,
        before.labels,
        before.tiers,
    )
    call_command("record_verdicts", stdout=out)
    assert out.getvalue().strip().endswith("Recorded 0 verdicts.")


def test_a_report_is_counted_once_while_nothing_new_is_decided(client, viewer, history, settings):
    settings.TRIAGE_REPORT_MAX_AGE_SECONDS = 300
    client.force_login(viewer)
    first = page(client)
    assert first.context["counted"].behind is False
    with CaptureQueriesContext(connection) as queries:
        again = page(client)
    assert not [q for q in queries if "triage_verdictlabel" in q["sql"]]
    assert again.context["report"].decisions == first.context["report"].decisions == 8


def test_a_report_behind_new_decisions_shows_its_count_and_counts_again(
    client, viewer, oncall, history, settings, django_capture_on_commit_callbacks
):
    settings.TRIAGE_REPORT_MAX_AGE_SECONDS = 300
    client.force_login(viewer)
    page(client)
    decide(make_proposal(number=40), oncall, "accept", WEEK_46 + timedelta(hours=1))

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        behind = page(client)
    assert behind.context["counted"].behind is True
    assert behind.context["report"].decisions == 8
    assert "being counted" in behind.content.decode()
    assert [c.func.__self__.name for c in callbacks] == ["triage.tasks.recount_report"]

    caught_up = page(client)
    assert caught_up.context["counted"].behind is False
    assert caught_up.context["report"].decisions == 9


def test_an_old_count_is_not_shown_once_decisions_came_since(client, viewer, oncall, history):
    # TRIAGE_REPORT_MAX_AGE_SECONDS is 0 in tests: a count older than that is redone at once.
    client.force_login(viewer)
    page(client)
    decide(make_proposal(number=41), oncall, "accept", WEEK_46 + timedelta(hours=1))
    assert page(client).context["report"].decisions == 9


def test_a_csv_table_is_read_from_the_page_s_count(client, viewer, history, settings):
    settings.TRIAGE_REPORT_MAX_AGE_SECONDS = 300
    client.force_login(viewer)
    page(client)
    url = reverse("report", args=["pt2"])
    with CaptureQueriesContext(connection) as queries:
        kinds = read_csv(client.get(url, RANGE | {"format": "csv", "table": "kinds"}))
    assert not [q for q in queries if "triage_verdictlabel" in q["sql"]]
    assert sum(int(row[1]) for row in kinds[1:]) == 8


def test_a_csv_table_behind_new_decisions_is_counted_again(
    client, viewer, oncall, history, settings
):
    # The page may show an older count with its age; a download has no such caption.
    settings.TRIAGE_REPORT_MAX_AGE_SECONDS = 300
    client.force_login(viewer)
    page(client)
    decide(make_proposal(number=43), oncall, "accept", WEEK_46 + timedelta(hours=1))
    url = reverse("report", args=["pt2"])
    kinds = read_csv(client.get(url, RANGE | {"format": "csv", "table": "kinds"}))
    assert sum(int(row[1]) for row in kinds[1:]) == 9


def test_beat_keeps_the_preset_ranges_counted(oncall):
    from triage.tasks import keep_reports_counted

    decide(make_proposal(number=42), oncall, "accept", timezone.now())
    keep_reports_counted.apply()
    queue = Queue.objects.get(slug="pt2")
    with CaptureQueriesContext(connection) as queries:
        shown = reports.counted(queue, reports.Period.ending(timezone.localdate(), 7))
    assert shown.report.decisions == 1
    assert not [q for q in queries if "triage_verdictlabel" in q["sql"]]
