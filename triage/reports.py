"""Where oncalls disagreed with the rubric: one queue's decisions over a range of days.

Counted by outcome, by rule, by label, by substitution and by confidence tier, with every
queue's acceptance week by week, and the current rubric backtested on the same decisions so a
rubric owner can see whether an edit helped. Each figure names the decisions behind it
(`Filter`), so the drill-down lists exactly what was counted.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Exists, Max, OuterRef, Q
from django.db.models.functions import TruncWeek
from django.utils import timezone

from triage import backtest
from triage.judging import COMPLETION, Judgement, judge, rules_cited
from triage.models import Decision, Proposal, Queue, Verdict, VerdictLabel, VerdictRule
from triage.rubric import engine, loader

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from django.db.models import QuerySet

    from triage.rubric.loader import Rubric

DEFAULT_DAYS = 28
# The ranges the report page offers in one click; beat keeps them counted.
PRESET_DAYS = (7, 28, 90)
# Enough to compare this year with the last; it also bounds the weekly series and the backtest.
MAX_DAYS = 731
ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
TIERS = tuple(Proposal.Tier.values)


class ReportInputError(ValueError):
    """A query parameter the report cannot honour; the message says what is wrong."""


# The range ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Period:
    """Whole days in the server's time zone, both ends included."""

    start: date
    end: date

    @classmethod
    def ending(cls, today: date, days: int = DEFAULT_DAYS) -> Period:
        return cls(today - timedelta(days=days - 1), today)

    def bounds(self) -> tuple[datetime, datetime]:
        """The first instant in the range and the first one after it."""
        zone = timezone.get_current_timezone()
        return (
            datetime.combine(self.start, time.min, tzinfo=zone),
            datetime.combine(self.end + timedelta(days=1), time.min, tzinfo=zone),
        )

    def mondays(self) -> list[date]:
        first = self.start - timedelta(days=self.start.weekday())
        return [first + timedelta(weeks=n) for n in range((self.end - first).days // 7 + 1)]

    def week(self, monday: date) -> Period:
        """The days of the week starting `monday` that lie in this range."""
        return Period(max(self.start, monday), min(self.end, monday + timedelta(days=6)))

    def params(self) -> dict[str, str]:
        return {"start": self.start.isoformat(), "end": self.end.isoformat()}


def _parse_date(name: str, value: str) -> date:
    # date.fromisoformat alone also takes 20261120 and 2026-W47-1: the URL must say one thing.
    if not ISO_DATE.fullmatch(value):
        raise ReportInputError(f"{name} must be a date written YYYY-MM-DD, not {value!r}.")
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ReportInputError(f"{name} {value!r} is not a date.") from None


def parse_period(params: Mapping[str, str], today: date) -> Period:
    """?start=YYYY-MM-DD&end=YYYY-MM-DD; a missing or empty end is today, a missing start is
    DEFAULT_DAYS before the end."""
    start_text, end_text = params.get("start", ""), params.get("end", "")
    end = _parse_date("end", end_text) if end_text else today
    start = _parse_date("start", start_text) if start_text else Period.ending(end).start
    if start > end:
        raise ReportInputError(f"The range starts ({start}) after it ends ({end}).")
    if end > today:
        raise ReportInputError(f"The range cannot end after today ({today}).")
    if (end - start).days >= MAX_DAYS:
        raise ReportInputError(f"A range may span at most {MAX_DAYS} days.")
    return Period(start, end)


# One decision, as the report reads it ---------------------------------------------------------

OUTCOMES = {
    "accepted": "Accepted as proposed",
    "edited": "Edited",
    "escalated": "Escalated",
    "rejected": "Rejected",
}


def verdicts_in(queue: Queue, period: Period) -> QuerySet[Verdict]:
    """Each proposal's last decision, where it falls in the range."""
    start, end = period.bounds()
    return Verdict.objects.filter(
        queue=queue, current=True, decided_at__gte=start, decided_at__lt=end
    )


def matching(queue: Queue, period: Period, chosen: Filter | None = None) -> QuerySet[Verdict]:
    """The verdicts behind a figure, newest first: the order of the verdicts' own index, so a
    page stops after its rows instead of sorting every decision in the range."""
    verdicts = verdicts_in(queue, period)
    if chosen is not None:
        verdicts = verdicts.filter(chosen.condition())
    return verdicts.order_by("-decided_at", "-decision_id")


def before(verdicts: QuerySet[Verdict], last: Verdict) -> QuerySet[Verdict]:
    """The verdicts after `last` in `matching`'s order. The first key is also bounded on its
    own, so the database starts its index range scan there rather than filtering from the top."""
    return verdicts.filter(decided_at__lte=last.decided_at).filter(
        Q(decided_at__lt=last.decided_at) | Q(decided_at=last.decided_at, decision_id__lt=last.pk)
    )


def judgements(
    queue: Queue, period: Period, chosen: Filter | None = None, *, with_text: bool = False
) -> QuerySet[Decision]:
    """The decisions behind a figure, newest first; judge() each one that is shown."""
    decisions = Decision.objects.filter(
        pk__in=matching(queue, period, chosen).values("decision_id")
    ).order_by("-decided_at", "-pk")
    return _with_issue(decisions, with_text=with_text)


def decisions_of(verdict_ids: list[int]) -> list[Decision]:
    """These verdicts' decisions, in the order given."""
    found = _with_issue(Decision.objects.filter(pk__in=verdict_ids)).in_bulk()
    return [found[pk] for pk in verdict_ids]


def _with_issue(decisions: QuerySet[Decision], *, with_text: bool = False) -> QuerySet[Decision]:
    if with_text:
        return decisions.select_related("proposal__issue", "write")
    return decisions.select_related("proposal__issue", "decided_by").defer(
        "proposal__issue__body", "proposal__issue__comments"
    )


# What a figure counts -------------------------------------------------------------------------

LABEL_SIDES = {
    "proposed": "proposed",
    "approved": "approved",
    "kept": "proposed and approved",
    "dropped": "proposed but not approved",
    "added": "approved but not proposed",
}


@dataclass(frozen=True)
class Filter:
    """The decisions behind one figure; every field that is set must hold."""

    kind: str = ""
    rule: str = ""
    kept: bool | None = None
    label: str = ""
    side: str = ""
    tier: str = ""
    dropped: str = ""
    added: str = ""

    def condition(self) -> Q:
        """The verdicts this filter holds for, as a database condition."""
        condition = Q()
        if self.kind:
            condition &= Q(outcome=self.kind)
        if self.tier:
            condition &= Q(tier=self.tier)
        if self.rule:
            rules = VerdictRule.objects.filter(verdict=OuterRef("pk"), rule=self.rule)
            if self.kept is not None:
                rules = rules.filter(kept=self.kept)
            condition &= Q(Exists(rules))
        if self.label:
            sides = {
                "": Q(),
                "proposed": Q(proposed=True),
                "approved": Q(approved=True),
                "kept": Q(proposed=True, approved=True),
                "dropped": Q(proposed=True, approved=False),
                "added": Q(proposed=False, approved=True),
            }
            labels = VerdictLabel.objects.filter(sides[self.side], verdict=OuterRef("pk"))
            condition &= Q(Exists(labels.filter(label=self.label)))
        if self.dropped and self.added:
            labels = VerdictLabel.objects.filter(verdict=OuterRef("pk"))
            condition &= Q(Exists(labels.filter(label=self.dropped, proposed=True, approved=False)))
            condition &= Q(Exists(labels.filter(label=self.added, proposed=False, approved=True)))
        return condition

    def describe(self) -> list[str]:
        parts = []
        if self.kind:
            parts.append(OUTCOMES[self.kind].lower())
        if self.rule:
            parts.append(f"rule {self.rule} fired")
            if self.kept is not None:
                parts.append("its change was kept" if self.kept else "its change was not kept")
        if self.label:
            parts.append(f"label {self.label} {LABEL_SIDES.get(self.side, 'proposed or approved')}")
        if self.tier:
            parts.append(f"{self.tier} confidence")
        if self.dropped:
            parts.append(f"the human dropped {self.dropped} and added {self.added}")
        return parts

    def params(self) -> dict[str, str]:
        params = {
            "kind": self.kind,
            "rule": self.rule,
            "kept": "" if self.kept is None else ("yes" if self.kept else "no"),
            "label": self.label,
            "side": self.side,
            "tier": self.tier,
            "dropped": self.dropped,
            "added": self.added,
        }
        return {key: value for key, value in params.items() if value}


def parse_filter(params: Mapping[str, str]) -> Filter:
    def choice(name: str, allowed: Iterable[str]) -> str:
        value = params.get(name, "")
        allowed = list(allowed)
        if value and value not in allowed:
            raise ReportInputError(f"{name} must be one of {', '.join(allowed)}, not {value!r}.")
        return value

    kept = choice("kept", ("yes", "no"))
    chosen = Filter(
        kind=choice("kind", OUTCOMES),
        rule=params.get("rule", ""),
        kept=None if not kept else kept == "yes",
        label=params.get("label", ""),
        side=choice("side", LABEL_SIDES),
        tier=choice("tier", TIERS),
        dropped=params.get("dropped", ""),
        added=params.get("added", ""),
    )
    if chosen.kept is not None and not chosen.rule:
        raise ReportInputError("kept needs a rule.")
    if chosen.side and not chosen.label:
        raise ReportInputError("side needs a label.")
    if bool(chosen.dropped) != bool(chosen.added):
        raise ReportInputError("A substitution needs both dropped and added.")
    return chosen


# The tables -----------------------------------------------------------------------------------


def ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


@dataclass(frozen=True)
class KindRow:
    kind: str
    title: str
    decisions: int
    share: float | None


@dataclass(frozen=True)
class RuleRow:
    rule: str
    in_rubric: bool
    fired: int
    kept: int

    @property
    def not_kept(self) -> int:
        return self.fired - self.kept

    @property
    def share(self) -> float | None:
        return ratio(self.kept, self.fired)


@dataclass(frozen=True)
class LabelRow:
    label: str
    proposed: int
    approved: int
    kept: int

    @property
    def dropped(self) -> int:
        return self.proposed - self.kept

    @property
    def added(self) -> int:
        return self.approved - self.kept

    @property
    def precision(self) -> float | None:
        return ratio(self.kept, self.proposed)

    @property
    def recall(self) -> float | None:
        return ratio(self.kept, self.approved)


@dataclass(frozen=True)
class SubstitutionRow:
    dropped: str
    added: str
    decisions: int


@dataclass(frozen=True)
class TierRow:
    tier: str
    decisions: int
    accepted: int

    @property
    def share(self) -> float | None:
        return ratio(self.accepted, self.decisions)


@dataclass(frozen=True)
class WeekRow:
    queue: str
    queue_name: str
    monday: date
    decisions: int
    accepted: int

    @property
    def week(self) -> str:
        year, week, _ = self.monday.isocalendar()
        return f"{year}-W{week:02d}"

    @property
    def share(self) -> float | None:
        return ratio(self.accepted, self.decisions)


@dataclass
class Report:
    queue: Queue
    period: Period
    rubric: Rubric
    decisions: int
    kinds: list[KindRow] = field(default_factory=list)
    rules: list[RuleRow] = field(default_factory=list)
    labels: list[LabelRow] = field(default_factory=list)
    substitutions: list[SubstitutionRow] = field(default_factory=list)
    tiers: list[TierRow] = field(default_factory=list)
    weeks: list[WeekRow] = field(default_factory=list)

    def week_series(self) -> dict[str, list[WeekRow]]:
        series: dict[str, list[WeekRow]] = defaultdict(list)
        for row in self.weeks:
            series[row.queue].append(row)
        return series


def build(queue: Queue, period: Period) -> Report:
    """Every table of the report, counted in the database: a few grouped queries over the
    range's verdicts, whatever their number."""
    rubric = loader.load(queue.rubric)
    verdicts = verdicts_in(queue, period)
    outcomes = dict(verdicts.values_list("outcome").annotate(n=Count("pk")).order_by())
    total = sum(outcomes.values())
    report = Report(queue=queue, period=period, rubric=rubric, decisions=total)
    report.kinds = [
        KindRow(kind, title, outcomes.get(kind, 0), ratio(outcomes.get(kind, 0), total))
        for kind, title in OUTCOMES.items()
    ]

    in_range = {
        "verdict__queue": queue,
        "verdict__current": True,
        "verdict__decided_at__gte": period.bounds()[0],
        "verdict__decided_at__lt": period.bounds()[1],
    }
    known = {rule.id for rule in rubric.rules} | ({COMPLETION} if rubric.completion else set())
    report.rules = sorted(
        (
            RuleRow(rule, rule in known, fired, kept)
            for rule, fired, kept in VerdictRule.objects.filter(**in_range)
            .values_list("rule")
            .annotate(n=Count("pk"), n_kept=Count("pk", filter=Q(kept=True)))
            .order_by()
        ),
        key=lambda row: (-row.fired, row.rule),
    )
    report.labels = sorted(
        (
            LabelRow(*row)
            for row in VerdictLabel.objects.filter(**in_range)
            .values_list("label")
            .annotate(
                n_proposed=Count("pk", filter=Q(proposed=True)),
                n_approved=Count("pk", filter=Q(approved=True)),
                n_kept=Count("pk", filter=Q(proposed=True, approved=True)),
            )
            .order_by()
        ),
        key=lambda row: (-(row.proposed + row.approved), row.label),
    )
    # Each label a human dropped, paired with each one they added in the same decision.
    pairs = (
        VerdictLabel.objects.filter(
            **in_range,
            proposed=True,
            approved=False,
            verdict__labels__proposed=False,
            verdict__labels__approved=True,
        )
        .values_list("label", "verdict__labels__label")
        .annotate(n=Count("pk"))
        .order_by()
    )
    report.substitutions = [
        SubstitutionRow(dropped, added, count)
        for dropped, added, count in sorted(pairs, key=lambda row: (-row[2], row[0], row[1]))
    ]
    tiers: dict[str, tuple[int, int]] = {
        tier: (n, accepted)
        for tier, n, accepted in verdicts.values_list("tier")
        .annotate(n=Count("pk"), n_accepted=Count("pk", filter=Q(outcome="accepted")))
        .order_by()
    }
    report.tiers = [TierRow(tier, *tiers.get(tier, (0, 0))) for tier in TIERS]
    report.weeks = weekly(period)
    return report


@dataclass(frozen=True)
class Counted:
    """A report as it was last counted, and whether decisions came since."""

    report: Report
    counted_at: datetime
    behind: bool


def counted(queue: Queue, period: Period) -> Counted:
    """The report from the cache while no decision came since, or while it is younger than
    TRIAGE_REPORT_MAX_AGE_SECONDS (then `behind`: the caller has it counted again in the
    background); else counted now. A report of 100,000 decisions takes a while to count."""
    cached = cache.get(_cache_key(queue, period))
    latest = _latest_verdict(queue)
    if cached is not None:
        report, counted_at, counted_latest = cached
        if counted_latest == latest:
            return Counted(report, counted_at, behind=False)
        age = (timezone.now() - counted_at).total_seconds()
        if age < settings.TRIAGE_REPORT_MAX_AGE_SECONDS:
            return Counted(report, counted_at, behind=True)
    return recount(queue, period, latest)


def keep_counted(queue: Queue, period: Period) -> None:
    """Count the report again if decisions came since it was (beat, for the preset ranges)."""
    cached = cache.get(_cache_key(queue, period))
    latest = _latest_verdict(queue)
    if cached is None or cached[2] != latest:
        recount(queue, period, latest)


def recount(queue: Queue, period: Period, latest: int | None = None) -> Counted:
    """Count the report now and keep the count; `latest` is the newest verdict it counts."""
    latest = _latest_verdict(queue) if latest is None else latest
    report, counted_at = build(queue, period), timezone.now()
    cache.set(_cache_key(queue, period), (report, counted_at, latest), CACHED_FOR_SECONDS)
    return Counted(report, counted_at, behind=False)


def _cache_key(queue: Queue, period: Period) -> str:
    rubric_version = loader.load(queue.rubric).version
    return f"report:{queue.pk}:{period.start}:{period.end}:{rubric_version}"


def _latest_verdict(queue: Queue) -> int | None:
    # Every decision adds a verdict with a higher id: the same latest id, the same report.
    latest: int | None = Verdict.objects.filter(queue=queue).aggregate(latest=Max("pk"))["latest"]
    return latest


# Long enough for the ranges people look at again; a range nobody opens again falls out.
CACHED_FOR_SECONDS = 24 * 3600


def weekly(period: Period) -> list[WeekRow]:
    """Every queue's share accepted as proposed, per ISO week of the range, in queue order."""
    start, end = period.bounds()
    rows = (
        Verdict.objects.filter(current=True, decided_at__gte=start, decided_at__lt=end)
        .annotate(monday=TruncWeek("decided_at"))
        .values_list("queue", "monday")
        .annotate(n=Count("pk"), n_accepted=Count("pk", filter=Q(outcome="accepted")))
        .order_by()
    )
    counts: dict[tuple[int, date], tuple[int, int]] = {}
    for queue_id, monday, n, accepted in rows:
        # TruncWeek gives a date on SQLite and an aware datetime on PostgreSQL.
        day = timezone.localtime(monday).date() if isinstance(monday, datetime) else monday
        counts[queue_id, day] = (n, accepted)
    return [
        WeekRow(queue.slug, queue.name, monday, *counts.get((queue.pk, monday), (0, 0)))
        for queue in Queue.objects.only("slug", "name", "position")
        for monday in period.mondays()
    ]


# CSV ------------------------------------------------------------------------------------------

TABLES = ("kinds", "rules", "labels", "substitutions", "tiers", "weeks")


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def table(report: Report, name: str) -> tuple[list[str], list[list[object]]]:
    """One table of the report as a header and rows, for CSV."""
    if name == "kinds":
        return ["outcome", "decisions", "share"], [
            [row.kind, row.decisions, _share(row.share)] for row in report.kinds
        ]
    if name == "rules":
        return ["rule", "in_current_rubric", "fired", "kept", "kept_share"], [
            [row.rule, row.in_rubric, row.fired, row.kept, _share(row.share)]
            for row in report.rules
        ]
    if name == "labels":
        return ["label", "proposed", "approved", "kept", "precision", "recall"], [
            [
                row.label,
                row.proposed,
                row.approved,
                row.kept,
                _share(row.precision),
                _share(row.recall),
            ]
            for row in report.labels
        ]
    if name == "substitutions":
        return ["dropped", "added", "decisions"], [
            [row.dropped, row.added, row.decisions] for row in report.substitutions
        ]
    if name == "tiers":
        return ["tier", "decisions", "accepted_as_proposed", "share"], [
            [row.tier, row.decisions, row.accepted, _share(row.share)] for row in report.tiers
        ]
    if name == "weeks":
        return ["queue", "week", "monday", "decisions", "accepted_as_proposed", "share"], [
            [
                row.queue,
                row.week,
                row.monday.isoformat(),
                row.decisions,
                row.accepted,
                _share(row.share),
            ]
            for row in report.weeks
        ]
    raise ReportInputError(f"table must be one of {', '.join(TABLES)}, not {name!r}.")


# What would change ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    precision: float
    recall: float
    f1: float
    exact: int


@dataclass(frozen=True)
class WhatWouldChange:
    """The current rubric's rules backtested on the decisions, beside the proposals as made."""

    rubric_version: str
    decisions: int
    # Decisions left out as `backtest --from-history` leaves them out: their write conflicted.
    left_out: int
    recorded: Score
    current: Score
    # Issues the current rubric now matches exactly and the recorded proposal did not, and back.
    fixed: list[Judgement]
    broken: list[Judgement]
    rubric_versions_seen: list[str]
    # What was scored: the issue of each decision above, as `backtest` takes it.
    cases: list[backtest.Case] = field(repr=False, default_factory=list)


def recorded_draft(proposal: Proposal) -> engine.Draft:
    """A stored proposal as the draft its proposer returned, to score it like a rubric."""
    return engine.Draft(
        proposer=proposal.proposer,
        proposer_version=proposal.proposer_version,
        rubric_version=proposal.rubric_version,
        add=tuple(proposal.add_labels),
        remove=tuple(proposal.remove_labels),
        template=proposal.comment_template,
        comment=proposal.comment_body,
        close=proposal.close,
        score=proposal.score,
        tier=proposal.tier,
        rationale=proposal.rationale,
        citations=(),
        rules_fired=tuple(rule for rule in rules_cited(proposal) if rule != COMPLETION),
    )


def _exact(entry: Mapping[str, object]) -> bool:
    return not entry["missing"] and not entry["extra"]


def _score(report: backtest.Report) -> Score:
    micro = report.micro()
    exact = sum(1 for entry in report.per_issue if _exact(entry))
    return Score(micro.precision, micro.recall, micro.f1, exact)


# The backtest reruns the rules on every issue's text: it takes the range's latest decisions.
BACKTESTED_DECISIONS = 300


def what_would_change(report: Report) -> WhatWouldChange:
    latest = list(judgements(report.queue, report.period, with_text=True)[:BACKTESTED_DECISIONS])
    by_issue: dict[int, Judgement] = {}
    left_out = 0
    for j in (judge(decision, report.rubric) for decision in reversed(latest)):
        write = getattr(j.decision, "write", None)
        if write is not None and write.state == "conflict":
            left_out += 1
            continue
        # Like cases_from_history: one case per issue, its latest decision.
        by_issue.pop(j.proposal.issue_id, None)
        by_issue[j.proposal.issue_id] = j
    chosen = list(by_issue.values())
    cases = [backtest.case_from_decision(j.decision) for j in chosen]
    # A queue reads one repository, so an issue number names one case.
    drafts = {j.proposal.issue.number: recorded_draft(j.proposal) for j in chosen}

    def as_recorded(rubric: Rubric, issue: engine.IssueInput) -> engine.Draft:
        return drafts[issue.number]

    rubric = report.rubric
    current = backtest.score(cases, rubric, engine.propose, engine.PROPOSER)
    recorded = backtest.score(cases, rubric, as_recorded, "recorded")

    fixed: list[Judgement] = []
    broken: list[Judgement] = []
    for j, now, then in zip(chosen, current.per_issue, recorded.per_issue, strict=True):
        if _exact(now) and not _exact(then):
            fixed.append(j)
        elif _exact(then) and not _exact(now):
            broken.append(j)
    return WhatWouldChange(
        rubric_version=rubric.version,
        decisions=len(cases),
        left_out=left_out,
        recorded=_score(recorded),
        current=_score(current),
        fixed=fixed,
        broken=broken,
        rubric_versions_seen=sorted({j.proposal.rubric_version for j in chosen}),
        cases=cases,
    )
