"""Rubric-disagreement reports: a queue's decisions over a range of days, and the decisions
behind each figure. Any logged-in user may read them."""

from __future__ import annotations

import csv
from collections import Counter
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from triage import backlog, charts, judging, reports, tuning
from triage.forms import DrillDownPageForm
from triage.models import Queue, Verdict
from triage.rubric import loader
from triage.spreadsheets import safe_cell, streamed_csv
from triage.tasks import recount_report

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import date

    from django.utils.safestring import SafeString

    from triage.views import HtmxHttpRequest

# The colours of the tier badges in console.css.
TIER_COLOURS = {"high": "#1f883d", "medium": "#bf8700", "low": "#cf222e"}
# More rows or columns than this and the heat map stops fitting; the table below has them all.
HEAT_MAP_SIZE = 12


def _period(request: HtmxHttpRequest, today: date) -> tuple[reports.Period, str]:
    """The requested range; on bad input the default range and what was wrong with it."""
    try:
        return reports.parse_period(request.GET, today), ""
    except reports.ReportInputError as exc:
        shown = f"Showing the last {reports.DEFAULT_DAYS} days instead."
        return reports.Period.ending(today), f"{exc} {shown}"


def _bad_request(message: str) -> HttpResponse:
    return HttpResponse(message, status=400, content_type="text/plain; charset=utf-8")


def drill_url(slug: str, period: reports.Period, **filters: Any) -> str:
    params = period.params() | reports.Filter(**filters).params()
    return f"{reverse('report-decisions', args=[slug])}?{urlencode(params)}"


def _csv_response(filename: str, header: list[str], rows: Iterable[list[object]]) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow(header)
    for row in rows:
        writer.writerow(safe_cell(value) for value in row)
    return response


@require_GET
def report(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    queue = get_object_or_404(Queue, slug=slug)
    today = timezone.localdate()
    fmt = request.GET.get("format", "")
    if fmt == "csv":
        # A script that asked for a range must not silently get another one.
        name = request.GET.get("table", "")
        if name not in reports.TABLES:
            return _bad_request(f"table must be one of {', '.join(reports.TABLES)}, not {name!r}.")
        try:
            period = reports.parse_period(request.GET, today)
        except reports.ReportInputError as exc:
            return _bad_request(str(exc))
        # The count the page shows, unless decisions came since: a download must be exact.
        counted = reports.counted(queue, period)
        if counted.behind:
            counted = reports.recount(queue, period)
        header, rows = reports.table(counted.report, name)
        filename = f"{queue.slug}-{name}-{period.start}-{period.end}.csv"
        return _csv_response(filename, header, rows)
    if fmt:
        return _bad_request(f"format must be csv, or absent for the page, not {fmt!r}.")
    period, error = _period(request, today)
    counted = reports.counted(queue, period)
    if counted.behind:
        recount_report.delay_on_commit(queue.pk, period.start.isoformat(), period.end.isoformat())
    built = counted.report
    # Rerunning the rules on every issue's text takes long: the page comes first, then this.
    changes = reports.what_would_change(built) if "backtest" in request.GET else None
    suggestions = None
    if changes is not None:
        suggestions = tuning.measure(built, tuning.suggest(built), changes.cases)
    if changes is not None and request.htmx:
        context = {"queue": queue, "report": built, "changes": changes, "suggestions": suggestions}
        return render(request, "triage/report.html#what-would-change", context)
    context = {
        "queue": queue,
        "period": period,
        "error": error,
        "report": built,
        "counted": counted,
        "changes": changes,
        "suggestions": suggestions,
        "range_query": urlencode(period.params()),
        "presets": [
            (days, urlencode(reports.Period.ending(today, days).params()))
            for days in reports.PRESET_DAYS
        ],
        "weeks": [(row, drill_url(row.queue, period.week(row.monday))) for row in built.weeks],
        "acceptance_chart": acceptance_chart(built),
        "tier_chart": tier_chart(built),
        "substitution_map": substitution_map(built),
    }
    return render(request, "triage/report.html", context)


def acceptance_chart(report: reports.Report) -> SafeString:
    period = report.period
    categories = [f"W{monday.isocalendar().week:02d}" for monday in period.mondays()]
    series = []
    for rows in report.week_series().values():
        points = [
            charts.Point(
                row.share,
                f"{row.queue_name}, {row.week}: {row.accepted} of {row.decisions} "
                "accepted as proposed",
                drill_url(row.queue, period.week(row.monday)),
            )
            for row in rows
        ]
        series.append(charts.Series(rows[0].queue_name, points))
    return charts.line_chart("Share accepted as proposed, per week and queue", categories, series)


def tier_chart(report: reports.Report) -> SafeString:
    bars = []
    for row in report.tiers:
        share = "none" if row.share is None else f"{row.share:.0%} of {row.decisions}"
        bars.append(
            charts.Bar(
                label=row.tier,
                value=row.share,
                caption=share,
                title=f"{row.tier}: {row.accepted} of {row.decisions} accepted as proposed",
                href=drill_url(report.queue.slug, report.period, tier=row.tier, kind="accepted"),
                colour=TIER_COLOURS.get(row.tier, charts.PALETTE[0]),
            )
        )
    return charts.bar_chart("Share accepted as proposed, per confidence tier", bars)


def substitution_map(report: reports.Report) -> SafeString:
    dropped: Counter[str] = Counter()
    added: Counter[str] = Counter()
    for row in report.substitutions:
        dropped[row.dropped] += row.decisions
        added[row.added] += row.decisions
    rows = [label for label, _ in dropped.most_common(HEAT_MAP_SIZE)]
    columns = [label for label, _ in added.most_common(HEAT_MAP_SIZE)]
    cells = {
        (row.dropped, row.added): charts.Cell(
            row.decisions,
            f"proposed {row.dropped}, human chose {row.added}: {row.decisions}",
            drill_url(report.queue.slug, report.period, dropped=row.dropped, added=row.added),
        )
        for row in report.substitutions
    }
    return charts.heat_map(
        "Substitutions: the label proposed (row) and the one the human chose instead (column)",
        rows,
        columns,
        cells,
        corner="proposed ↓ chosen →",
    )


DECISION_FIELDS = [
    "decision_id",
    "decided_at",
    "decided_by",
    "outcome",
    "issue_number",
    "issue_title",
    "tier",
    "score",
    "rules",
    "proposed_add",
    "proposed_remove",
    "approved_add",
    "approved_remove",
    "note",
]


def _decision_row(judgement: judging.Judgement) -> list[object]:
    decision, proposal = judgement.decision, judgement.proposal
    return [
        decision.pk,
        decision.decided_at.isoformat(),
        decision.decided_by.get_username(),
        judgement.outcome,
        proposal.issue.number,
        proposal.issue.title,
        proposal.tier,
        proposal.score,
        "; ".join(judgement.rules),
        "; ".join(proposal.add_labels),
        "; ".join(proposal.remove_labels),
        "; ".join(sorted(judgement.approved)),
        "" if decision.kind == "reject" else "; ".join(decision.remove_labels),
        decision.note,
    ]


@require_GET
def decisions(request: HtmxHttpRequest, slug: str) -> HttpResponse | StreamingHttpResponse:
    """The decisions behind one figure of the report, newest first, a page at a time."""
    queue = get_object_or_404(Queue, slug=slug)
    today = timezone.localdate()
    form = DrillDownPageForm(request.GET)
    if not form.is_valid():
        return _bad_request("format must be csv or absent, and before a decision's number.")
    fmt = form.cleaned_data["format"]
    try:
        chosen = reports.parse_filter(request.GET)
        if fmt == "csv":
            period, error = reports.parse_period(request.GET, today), ""
        else:
            period, error = _period(request, today)
    except reports.ReportInputError as exc:
        # Only a hand-edited address gets here: the report's links are well-formed.
        return _bad_request(str(exc))
    rubric = loader.load(queue.rubric)
    if fmt == "csv":
        filename = f"{queue.slug}-decisions-{period.start}-{period.end}.csv"
        rows = (
            _decision_row(judging.judge(decision, rubric))
            for decision in reports.judgements(queue, period, chosen).iterator(chunk_size=500)
        )
        return streamed_csv(filename, DECISION_FIELDS, rows)
    matching = reports.matching(queue, period, chosen)
    page = matching
    if form.cleaned_data["before"] is not None:
        last = Verdict.objects.filter(pk=form.cleaned_data["before"]).only("decided_at").first()
        if last is None:
            return _bad_request("before names no decision.")
        page = reports.before(matching, last)
    size = settings.TRIAGE_PAGE_SIZE
    ids = list(page.values_list("decision_id", flat=True)[: size + 1])
    more = len(ids) > size
    listed = [judging.judge(decision, rubric) for decision in reports.decisions_of(ids[:size])]
    filters = chosen.params()
    context = {
        "queue": queue,
        "period": period,
        "error": error,
        "chosen": chosen,
        "listed": listed,
        "total": matching.values("pk")[: backlog.COUNT_UP_TO + 1].count(),
        "paged": form.cleaned_data["before"] is not None,
        "next_before": listed[-1].decision.pk if more else None,
        "filter_params": filters,
        "page_query": urlencode(period.params() | filters),
        "range_query": urlencode(period.params()),
        "csv_query": urlencode(period.params() | filters | {"format": "csv"}),
    }
    return render(request, "triage/report_decisions.html", context)
