"""The weekly oncall rotation: whose week it is, the handoff between weeks, and how it went.

Weeks start on Monday in TRIAGE_ROTATION_TIME_ZONE, whatever the server's clock says: an
oncall in California and one in London must agree on when a week ends.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from triage.models import Decision, Proposal, Queue, RotationWeek
from triage.signin.handles import handles

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


def zone() -> ZoneInfo:
    return ZoneInfo(settings.TRIAGE_ROTATION_TIME_ZONE)


def week_of(moment: datetime) -> date:
    """The Monday that starts the rotation week `moment` falls in."""
    local = moment.astimezone(zone()).date()
    return local - timedelta(days=local.weekday())


def week_began(monday: date) -> datetime:
    """The instant a rotation week begins."""
    return datetime.combine(monday, datetime.min.time(), tzinfo=zone())


def current_week() -> date:
    return week_of(timezone.now())


def monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def my_queue(user: AbstractBaseUser | AnonymousUser) -> Queue | None:
    """The queue this user is oncall for this week, if any."""
    if not user.is_authenticated:
        return None
    week = (
        RotationWeek.objects.filter(oncall_id=user.pk, week_start=current_week())
        .select_related("queue")
        .first()
    )
    return week.queue if week else None


def assign(queue: Queue, week_start: date, oncall: AbstractBaseUser) -> RotationWeek:
    week, _ = RotationWeek.objects.update_or_create(
        queue=queue, week_start=monday(week_start), defaults={"oncall_id": oncall.pk}
    )
    return week


def round_robin(
    queue: Queue, people: list[AbstractBaseUser], first_week: date, weeks: int
) -> list[RotationWeek]:
    """Assign `weeks` weeks from `first_week` to the people in turn, replacing what was there."""
    start = monday(first_week)
    with transaction.atomic():
        return [
            assign(queue, start + timedelta(weeks=index), people[index % len(people)])
            for index in range(weeks)
        ]


def swap(queue: Queue, first: date, second: date) -> None:
    """Exchange the oncalls of two weeks (both must be assigned)."""
    with transaction.atomic():
        weeks = {
            week.week_start: week
            for week in RotationWeek.objects.select_for_update().filter(
                queue=queue, week_start__in=[monday(first), monday(second)]
            )
        }
        if len(weeks) != 2:
            raise ValueError("both weeks must have an oncall to swap them")
        a, b = weeks[monday(first)], weeks[monday(second)]
        a.oncall_id, b.oncall_id = b.oncall_id, a.oncall_id
        a.save(update_fields=["oncall"])
        b.save(update_fields=["oncall"])


def write_handoff(queue: Queue, user: AbstractBaseUser, note: str) -> RotationWeek | None:
    """The outgoing oncall's note for the next week; only this week's oncall may write it."""
    week = RotationWeek.objects.filter(
        queue=queue, week_start=current_week(), oncall_id=user.pk
    ).first()
    if week is None:
        return None
    week.handoff_note = note.strip()
    week.handoff_written_at = timezone.now()
    week.save(update_fields=["handoff_note", "handoff_written_at"])
    return week


def take_handoff(queue: Queue, user: AbstractBaseUser | AnonymousUser) -> RotationWeek | None:
    """The previous week's handoff, once, on this week's oncall's first visit of their week.

    Returns the previous week's row (its note) the first time and marks it seen; None for
    anybody else, or afterwards: nobody is reminded about a week that is not theirs.
    """
    if not user.is_authenticated:
        return None
    this_week = current_week()
    mine = RotationWeek.objects.filter(queue=queue, week_start=this_week, oncall_id=user.pk).first()
    if mine is None or mine.handoff_seen_at is not None:
        return None
    previous = RotationWeek.objects.filter(
        queue=queue, week_start=this_week - timedelta(weeks=1)
    ).first()
    if previous is None or not previous.handoff_note:
        return None
    seen = RotationWeek.objects.filter(pk=mine.pk, handoff_seen_at__isnull=True).update(
        handoff_seen_at=timezone.now()
    )
    return previous if seen else None


def carried_over(proposals: list[Proposal]) -> set[int]:
    """Ids of the pending proposals whose issue arrived before this rotation week began."""
    began = week_began(current_week())
    return {p.pk for p in proposals if p.issue.created_at < began}


def stale(queue: Queue, proposals: list[Proposal]) -> set[int]:
    """Ids of the pending proposals whose issue has waited longer than the queue allows."""
    cutoff = timezone.now() - timedelta(hours=queue.stale_after_hours)
    return {p.pk for p in proposals if p.issue.created_at < cutoff}


@dataclass
class WeekStats:
    week_start: date
    oncall: str
    decided_by: str
    kinds: Counter[str] = field(default_factory=Counter)
    waits: list[float] = field(default_factory=list)

    @property
    def decided(self) -> int:
        return sum(self.kinds.values())

    @property
    def median_hours(self) -> float | None:
        return round(statistics.median(self.waits), 1) if self.waits else None


def stats(queue: Queue, weeks: int = 8) -> list[WeekStats]:
    """Per week and deciding oncall: decisions by kind, and the median hours from an issue's
    arrival to its decision. Newest week first."""
    first = current_week() - timedelta(weeks=weeks - 1)
    planned = dict(
        RotationWeek.objects.filter(queue=queue, week_start__gte=first).values_list(
            "week_start", "oncall_id"
        )
    )
    rows: dict[tuple[date, str], WeekStats] = {}
    decisions = list(
        Decision.objects.filter(proposal__queue=queue, decided_at__gte=week_began(first))
        .select_related("proposal__issue")
        .only("kind", "decided_at", "decided_by_id", "proposal__issue__created_at")
    )
    # Everyone is named by their GitHub handle.
    names = handles({*planned.values(), *(decision.decided_by_id for decision in decisions)})
    oncalls = {week: names.get(user_id, "") for week, user_id in planned.items()}
    for decision in decisions:
        week = week_of(decision.decided_at)
        who = names.get(decision.decided_by_id, "")
        row = rows.get((week, who))
        if row is None:
            row = rows[(week, who)] = WeekStats(week, oncalls.get(week, ""), who)
        row.kinds[decision.kind] += 1
        arrived = decision.proposal.issue.created_at
        row.waits.append((decision.decided_at - arrived).total_seconds() / 3600)
    return sorted(rows.values(), key=lambda r: (r.week_start, r.decided_by), reverse=True)


def schedule(
    queue: Queue, before: int = 4, after: int = 8
) -> list[tuple[date, RotationWeek | None]]:
    """The weeks around this one, each with its assignment (None where nobody is assigned)."""
    this_week = current_week()
    mondays = [this_week + timedelta(weeks=offset) for offset in range(-before, after + 1)]
    assigned: dict[date, RotationWeek] = {}
    for week in RotationWeek.objects.filter(queue=queue, week_start__in=mondays).select_related(
        "oncall"
    ):
        assigned[week.week_start] = week
    return [(day, assigned.get(day)) for day in mondays]
