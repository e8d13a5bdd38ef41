"""The triage-review meeting: what its agenda holds, how open items roll over, and recording the
outcome the facilitator approves (written to GitHub through the outbox, like any decision)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Prefetch, Q, QuerySet
from django.utils import timezone

from triage import outbox
from triage.models import (
    ESCALATION_LABEL,
    AgendaItem,
    Decision,
    Issue,
    Meeting,
    Proposal,
    Queue,
    Write,
    with_label,
)
from triage.rubric.loader import known_labels

if TYPE_CHECKING:
    from collections.abc import Iterable

HIGH_PRIORITY = "high priority"
NEEDS_REPRODUCTION = "needs reproduction"
# The label each outcome implies. "not a priority" and "labels" imply none: the facilitator's own
# labels (if any) are the whole change.
OUTCOME_LABELS = {
    AgendaItem.Outcome.HIGH_PRIORITY: HIGH_PRIORITY,
    AgendaItem.Outcome.NEEDS_REPRODUCTION: NEEDS_REPRODUCTION,
}
OUTCOME_PHRASES = {
    AgendaItem.Outcome.HIGH_PRIORITY: "high priority",
    AgendaItem.Outcome.NOT_PRIORITY: "not a priority",
    AgendaItem.Outcome.NEEDS_REPRODUCTION: "needs reproduction",
    AgendaItem.Outcome.LABELS: "labels updated",
}
ROLLED_OVER_PREFIX = "rolled over from "
NO_QUEUE = "no queue"
NO_MODULE = "no module"
MODULE_PREFIX = "module: "
# GitHub logins: letters, digits and single hyphens, at most 39 characters.
GITHUB_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")
# Many issues are listed: their bodies and comments, which can be megabytes, are never needed.
HEAVY_ISSUE_FIELDS = ("issue__body", "issue__comments")


class AgendaError(ValueError):
    """A request the agenda refuses, with a message for the facilitator."""


# ----------------------------------------------------------------------------- meetings


# Opening a meeting further than this from today asks the oncall to confirm the date.
CONFIRM_BEYOND_DAYS = 14


def next_meeting_day(today: date) -> date:
    """The default date offered for a new meeting: today if it is a Tuesday, else next Tuesday."""
    return today + timedelta(days=(1 - today.weekday()) % 7)


def suggested_day(today: date) -> date:
    """The date the "open a meeting" form offers: the next Tuesday from today, or after the
    latest meeting if that is later (an earlier date would be refused)."""
    latest = Meeting.objects.order_by("-date").values_list("date", flat=True).first()
    if latest is not None and latest >= today:
        return next_meeting_day(latest + timedelta(days=1))
    return next_meeting_day(today)


def previous_meeting(meeting: Meeting) -> Meeting | None:
    return Meeting.objects.filter(date__lt=meeting.date).order_by("-date").first()


def is_current(meeting: Meeting) -> bool:
    """Only the latest meeting's agenda changes; earlier ones are the record of what happened."""
    return not Meeting.objects.filter(date__gt=meeting.date).exists()


def upcoming_meeting() -> Meeting | None:
    """The latest meeting, if it has not been held yet: what an escalation now goes to."""
    latest = Meeting.objects.order_by("-date").first()
    if latest is None or latest.date < timezone.localdate():
        return None
    return latest


def add_escalation(decision: Decision) -> int:
    """Put a fresh escalation on the upcoming meeting's agenda at once, with its note; returns
    the items added (0 when the issue was there already: its reasons now carry the note)."""
    meeting = upcoming_meeting()
    if meeting is None or decision.kind != Decision.Kind.ESCALATE:
        return 0
    return build(meeting)


def open_meeting(day: date) -> Meeting:
    """The meeting of `day`, created with every open item of earlier meetings rolled into it."""
    existing = Meeting.objects.filter(date=day).first()
    if existing is not None:
        return existing
    if Meeting.objects.filter(date__gt=day).exists():
        # Items only roll forward: a meeting slipped in before a later one would take items
        # that are already on the later agenda.
        raise AgendaError("A later meeting exists already: open that one, or a later date.")
    with transaction.atomic():
        meeting, created = Meeting.objects.get_or_create(date=day)
        if created:
            roll_over(meeting)
    return meeting


def roll_over(meeting: Meeting) -> int:
    """Move every open item of earlier meetings onto this one; returns how many were added.

    Also runs on each refresh: an item whose write met a conflict goes back to open in the
    meeting that decided it, and must come forward rather than stay behind in a past meeting.
    """
    added = 0
    stale = AgendaItem.objects.filter(
        meeting__date__lt=meeting.date, status=AgendaItem.Status.OPEN
    ).select_related("meeting")
    with transaction.atomic():
        for old in stale.select_for_update(of=("self",)):
            reason = f"{ROLLED_OVER_PREFIX}{old.meeting.date.isoformat()}"
            # The newest roll-over is the one that matters; rolled_from keeps the chain.
            reasons = [reason, *(r for r in old.reasons if not r.startswith(ROLLED_OVER_PREFIX))]
            item, created = AgendaItem.objects.get_or_create(
                meeting=meeting,
                issue_id=old.issue_id,
                defaults={
                    "queue_id": old.queue_id,
                    "reasons": reasons,
                    "escalation_id": old.escalation_id,
                    "rolled_from": old,
                },
            )
            if created:
                added += 1
            else:
                _merge(item, reasons, escalation_id=old.escalation_id, rolled_from=old)
            AgendaItem.objects.filter(pk=old.pk).update(status=AgendaItem.Status.ROLLED_OVER)
    return added


# ----------------------------------------------------------------------------- building


@dataclass
class _Candidate:
    issue_id: int
    queue_id: int | None
    reason: str
    escalation_id: int | None = None


def build(meeting: Meeting) -> int:
    """Add what the meeting must discuss and is not on its agenda yet; returns how many items
    were added. Safe to run again: an issue is on an agenda once, its reasons merged."""
    if not is_current(meeting):
        raise AgendaError("This meeting is over: a later meeting holds the agenda now.")
    added = roll_over(meeting)
    escalated = _escalated(meeting)
    # An escalation's own write put `triage review` there: "labelled on GitHub" would only repeat
    # it, and misleadingly.
    console_labelled = {candidate.issue_id for candidate in escalated}
    labelled = [c for c in _labelled() if c.issue_id not in console_labelled]
    for candidate in [*escalated, *labelled, *_suggested()]:
        with transaction.atomic():
            item, created = AgendaItem.objects.get_or_create(
                meeting=meeting,
                issue_id=candidate.issue_id,
                defaults={
                    "queue_id": candidate.queue_id,
                    "reasons": [candidate.reason],
                    "escalation_id": candidate.escalation_id,
                },
            )
            if created:
                added += 1
            else:
                _merge(item, [candidate.reason], escalation_id=candidate.escalation_id)
    return added


def _merge(
    item: AgendaItem,
    reasons: list[str],
    *,
    escalation_id: int | None = None,
    rolled_from: AgendaItem | None = None,
) -> None:
    """Add reasons to an item already on the agenda. A decided item is left as it was decided."""
    with transaction.atomic():
        locked = AgendaItem.objects.select_for_update().get(pk=item.pk)
        if locked.status != AgendaItem.Status.OPEN:
            return
        new = [reason for reason in reasons if reason not in locked.reasons]
        fields = []
        if new:
            locked.reasons = [*locked.reasons, *new]
            fields.append("reasons")
        if escalation_id is not None and locked.escalation_id is None:
            locked.escalation_id = escalation_id
            fields.append("escalation")
        if rolled_from is not None and locked.rolled_from_id is None:
            locked.rolled_from = rolled_from
            fields.append("rolled_from")
        if fields:
            locked.save(update_fields=fields)


def _escalated(meeting: Meeting) -> list[_Candidate]:
    """Escalations in the console since the previous meeting (all of them for the first one)."""
    recent = (
        Decision.objects.filter(kind=Decision.Kind.ESCALATE, proposal__issue__state="open")
        .select_related("decided_by", "proposal")
        .order_by("decided_at", "pk")
    )
    previous = previous_meeting(meeting)
    if previous is not None:
        # From the start of the previous meeting's day: an escalation made after it ended that
        # day is not missed, and one it already decided is excluded below.
        since = timezone.make_aware(datetime.combine(previous.date, time.min))
        recent = recent.filter(decided_at__gte=since)
    escalations = list(recent)
    decided = _last_decided({escalation.proposal.issue_id for escalation in escalations})
    candidates = []
    for escalation in escalations:
        issue_id = escalation.proposal.issue_id
        last = decided.get(issue_id)
        # Decided by a meeting after it was escalated: handled. Escalated again after a meeting
        # decided it: a human asks for another look, so it is back on the agenda.
        if last is not None and last >= escalation.decided_at:
            continue
        who = escalation.decided_by.get_username()
        candidates.append(
            _Candidate(
                issue_id=issue_id,
                queue_id=escalation.proposal.queue_id,
                reason=f"escalated in the console by {who}: {escalation.note}",
                escalation_id=escalation.pk,
            )
        )
    return candidates


def _labelled() -> list[_Candidate]:
    """Open issues carrying `triage review`, however it got there (the sync keeps labels
    current, so this covers labels applied on GitHub directly)."""
    issues = with_label(Issue.objects.filter(state="open"), "labels", ESCALATION_LABEL)
    issue_ids = list(issues.values_list("pk", flat=True))
    # A meeting decided it and its write, which removes the label, has not landed yet. Once it
    # has, the label being there again means a human put it back.
    in_flight = set(
        AgendaItem.objects.filter(issue_id__in=issue_ids, status=AgendaItem.Status.DECIDED)
        .exclude(write__state=Write.State.APPLIED)
        .values_list("issue_id", flat=True)
    )
    queues = _queues_of(issue_ids)
    return [
        _Candidate(
            issue_id=issue_id,
            queue_id=queues.get(issue_id),
            reason=f"labelled `{ESCALATION_LABEL}` on GitHub",
        )
        for issue_id in issue_ids
        if issue_id not in in_flight
    ]


def _suggested() -> list[_Candidate]:
    """Pending proposals whose rubric asks for escalation (pt2: crash, silent wrong results,
    regression, flaky test, performance regression)."""
    proposals = with_label(
        Proposal.objects.filter(status=Proposal.Status.PENDING, issue__state="open"),
        "add_labels",
        ESCALATION_LABEL,
    ).order_by("pk")
    # The rules fire again on every re-proposal: once a meeting has decided the issue, only a
    # human (an escalation or the label) brings it back.
    decided = set(
        AgendaItem.objects.filter(status=AgendaItem.Status.DECIDED).values_list(
            "issue_id", flat=True
        )
    )
    return [
        _Candidate(
            issue_id=proposal.issue_id,
            queue_id=proposal.queue_id,
            reason=f"the proposal suggests escalation: {proposal.rationale}",
        )
        for proposal in proposals.only("pk", "issue_id", "queue_id", "rationale")
        if proposal.issue_id not in decided
    ]


def _last_decided(issue_ids: set[int]) -> dict[int, datetime]:
    """When a meeting last decided each issue."""
    last: dict[int, datetime] = {}
    for issue_id, decided_at in AgendaItem.objects.filter(
        issue_id__in=issue_ids, status=AgendaItem.Status.DECIDED, decided_at__isnull=False
    ).values_list("issue_id", "decided_at"):
        if decided_at is not None and (issue_id not in last or decided_at > last[issue_id]):
            last[issue_id] = decided_at
    return last


def _queues_of(issue_ids: list[int]) -> dict[int, int]:
    """The queue each issue was last proposed in; else the first queue its labels match."""
    queues: dict[int, int] = {}
    for issue_id, queue_id in (
        Proposal.objects.filter(issue_id__in=issue_ids)
        .order_by("issue_id", "-created_at", "-pk")
        .values_list("issue_id", "queue_id")
    ):
        queues.setdefault(issue_id, queue_id)
    unplaced = [issue_id for issue_id in issue_ids if issue_id not in queues]
    if unplaced:
        all_queues = list(Queue.objects.all())
        for issue in Issue.objects.filter(pk__in=unplaced).only("pk", "labels", "state"):
            for queue in all_queues:
                if queue.matches(issue.labels, issue.state):
                    queues[issue.pk] = queue.pk
                    break
    return queues


# ----------------------------------------------------------------------------- reading


@dataclass
class Entry:
    """One agenda item as the page and the notes show it."""

    item: AgendaItem
    # The issue's current proposal, preferably in the item's queue.
    proposal: Proposal | None
    write: Write | None

    @property
    def modules(self) -> list[str]:
        return _modules(self.item.issue.labels) or _modules(
            self.proposal.add_labels if self.proposal else []
        )

    @property
    def module(self) -> str:
        modules = self.modules
        return modules[0] if modules else NO_MODULE

    @property
    def escalated_by(self) -> str:
        escalation = self.item.escalation
        return escalation.decided_by.get_username() if escalation else ""

    @property
    def removable_labels(self) -> list[str]:
        """The issue's labels a facilitator may choose to remove (`triage review` always is)."""
        return [label for label in self.item.issue.labels if label != ESCALATION_LABEL]


@dataclass
class QueueGroup:
    name: str
    modules: list[tuple[str, list[Entry]]]


def _modules(labels: list[str]) -> list[str]:
    return sorted(label for label in labels if label.startswith(MODULE_PREFIX))


def items(meeting: Meeting) -> QuerySet[AgendaItem]:
    """The meeting's items with everything the page shows, in a constant number of queries."""
    live_proposals = (
        Proposal.objects.filter(status__in=[Proposal.Status.PENDING, Proposal.Status.DECIDED])
        .only(
            "pk",
            "issue_id",
            "queue_id",
            "status",
            "add_labels",
            "remove_labels",
            "comment_template",
            "close",
            "tier",
            "score",
            "rationale",
            "created_at",
        )
        .order_by("-created_at", "-pk")
    )
    return (
        AgendaItem.objects.filter(meeting=meeting)
        .select_related(
            "meeting", "issue", "queue", "escalation__decided_by", "decided_by", "write"
        )
        .defer(*HEAVY_ISSUE_FIELDS)
        .prefetch_related(
            Prefetch("issue__proposals", queryset=live_proposals, to_attr="live_proposals")
        )
        .order_by("issue__number", "pk")
    )


def entry(item: AgendaItem) -> Entry:
    proposals: list[Proposal] = getattr(item.issue, "live_proposals", [])
    in_queue = [p for p in proposals if p.queue_id == item.queue_id]
    proposal = (in_queue or proposals)[0] if proposals else None
    return Entry(item=item, proposal=proposal, write=getattr(item, "write", None))


def page(meeting: Meeting, after: AgendaItem | None = None) -> tuple[list[AgendaItem], int | None]:
    """A page of the meeting's items in issue order (after `after`), and where the next starts."""
    rows = items(meeting)
    if after is not None:
        number = after.issue.number
        rows = rows.filter(Q(issue__number__gt=number) | Q(issue__number=number, pk__gt=after.pk))
    size = settings.TRIAGE_PAGE_SIZE
    shown = list(rows[: size + 1])
    return shown[:size], (shown[size - 1].pk if len(shown) > size else None)


def grouped(agenda_items: Iterable[AgendaItem]) -> list[QueueGroup]:
    """The agenda by queue (in the queues' order, then items without one), then by module (the
    first of the issue's `module: ` labels, else of those its proposal adds)."""
    by_queue: dict[tuple[int, str, str], dict[str, list[Entry]]] = {}
    for item in agenda_items:
        queue = item.queue
        key = (0, f"{queue.position:05d} {queue.slug}", queue.name) if queue else (1, "", NO_QUEUE)
        one = entry(item)
        by_queue.setdefault(key, {}).setdefault(one.module, []).append(one)
    return [
        QueueGroup(
            name=key[2],
            modules=sorted(modules.items(), key=lambda pair: (pair[0] == NO_MODULE, pair[0])),
        )
        for key, modules in sorted(by_queue.items())
    ]


# ----------------------------------------------------------------------------- outcomes


def _clean(labels: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for value in labels:
        label = value.strip()
        if label and label not in seen:
            seen.append(label)
    return seen


def comment_body(meeting_day: date, outcome: str, owner: str, note: str) -> str:
    """The comment posted with the outcome: "Triage review <date>: high priority, owner @x. …"."""
    text = (
        f"Triage review {meeting_day.isoformat()}: {OUTCOME_PHRASES[AgendaItem.Outcome(outcome)]}"
    )
    if owner:
        text += f", owner @{owner}"
    text += "."
    if note:
        text += f" {note}"
    return text


def record(
    item: AgendaItem,
    user: Any,
    outcome: str,
    owner: str,
    add_labels: Iterable[str],
    remove_labels: Iterable[str],
    note: str,
) -> AgendaItem | None:
    """Record the outcome the facilitator approves and queue its GitHub write (the outbox).

    Recording is the approval: nothing reaches GitHub before it. The label policy:
    - `high priority` may be applied here and nowhere else, and only with the "high priority"
      outcome, which adds it (the console's decide view and the rubrics refuse it);
    - "needs reproduction" adds `needs reproduction`; "not a priority" and "labels only" add
      nothing of their own;
    - every outcome removes `triage review` if the issue has it: the meeting has handled it, so
      it must not come back on the next agenda; adding it here is refused for the same reason;
    - any other label must exist in the repository (pytorch-labels.json), one to remove must be
      on the issue, and no label is both added and removed.

    Raises AgendaError for an invalid outcome; returns None if the item is no longer open (a
    double submit, or it rolled over to a later meeting).
    """
    if outcome not in AgendaItem.Outcome.values:
        raise AgendaError("Choose an outcome.")
    kind = AgendaItem.Outcome(outcome)
    owner = owner.strip().removeprefix("@")
    if owner and not GITHUB_LOGIN.match(owner):
        raise AgendaError(f"{owner!r} is not a GitHub login.")
    note = " ".join(note.split())
    add = _clean(add_labels)
    remove = _clean(remove_labels)
    known = known_labels()
    for label in add:
        if label == HIGH_PRIORITY and kind != AgendaItem.Outcome.HIGH_PRIORITY:
            raise AgendaError("`high priority` comes with the “high priority” outcome only.")
        if label == ESCALATION_LABEL:
            raise AgendaError("The meeting handles `triage review`: it is removed, not added.")
        if label not in known:
            raise AgendaError(f"{label!r} is not a label of the repository.")
    implied = OUTCOME_LABELS.get(kind)
    if implied and implied not in add:
        add.append(implied)
    with transaction.atomic():
        issue = Issue.objects.only("pk", "labels").get(pk=item.issue_id)
        current = list(issue.labels)
        for label in remove:
            if label not in current:
                raise AgendaError(f"{label!r} is not on the issue, so it cannot be removed.")
        if ESCALATION_LABEL in current and ESCALATION_LABEL not in remove:
            remove.append(ESCALATION_LABEL)
        both = set(add) & set(remove)
        if both:
            raise AgendaError(f"{sorted(both)[0]!r} cannot be both added and removed.")
        claimed = AgendaItem.objects.filter(pk=item.pk, status=AgendaItem.Status.OPEN).update(
            status=AgendaItem.Status.DECIDED,
            outcome=kind.value,
            owner=owner,
            add_labels=[label for label in add if label not in current],
            remove_labels=remove,
            comment_body=comment_body(item.meeting.date, kind, owner, note),
            note=note,
            labels_seen=current,
            decided_by=user,
            decided_at=timezone.now(),
        )
        if not claimed:
            return None
        item.refresh_from_db()
        outbox.for_outcome(item)
    return item


def retry(item: AgendaItem) -> Write | None:
    """Queue a failed outcome write again (its Retry button); the caller sends it."""
    write = Write.objects.filter(outcome=item).first()
    if write is None or not outbox.requeue(write):
        return None
    return write


# ----------------------------------------------------------------------------- the notes


def _md(text: str) -> str:
    """One line of Markdown from free text: no line breaks, no stray link or emphasis syntax."""
    text = " ".join(text.split())
    return re.sub(r"([\\*_\[\]<>|])", r"\\\1", text)


def _chips(labels: list[str], sign: str) -> list[str]:
    return [f"{sign}`{label}`" for label in labels]


def as_markdown(meeting: Meeting) -> str:
    """The agenda with its outcomes, for the meeting notes."""
    groups = grouped(items(meeting))
    lines = [f"# Triage review {meeting.date.isoformat()}", ""]
    total = sum(len(entries) for group in groups for _, entries in group.modules)
    if not total:
        lines.append("Nothing on the agenda.")
    for group in groups:
        lines += [f"## {_md(group.name)}", ""]
        for module, entries in group.modules:
            lines += [f"### {_md(module)}", ""]
            for one in entries:
                lines += _entry_markdown(one)
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _entry_markdown(one: Entry) -> list[str]:
    item, issue = one.item, one.item.issue
    # A URL may hold ")" or spaces that would end the Markdown link early.
    target = issue.link.replace("(", "%28").replace(")", "%29").replace(" ", "%20")
    link = f"[#{issue.number}]({target})" if target else f"#{issue.number}"
    lines = [f"- {link} {_md(issue.title)}"]
    # An escalation's reason names who escalated it and quotes the note.
    lines.append(f"  - Why: {'; '.join(_md(reason) for reason in item.reasons)}")
    if one.proposal is not None:
        proposed = [*_chips(one.proposal.add_labels, "+"), *_chips(one.proposal.remove_labels, "-")]
        lines.append(f"  - Proposal: {', '.join(proposed) or 'no change'}")
    if item.status == AgendaItem.Status.DECIDED:
        decided = OUTCOME_PHRASES[AgendaItem.Outcome(item.outcome)]
        if item.owner:
            decided += f", owner @{item.owner}"
        changes = [*_chips(item.add_labels, "+"), *_chips(item.remove_labels, "-")]
        if changes:
            decided += f" ({', '.join(changes)})"
        if item.note:
            decided += f". {_md(item.note)}"
        by = item.decided_by.get_username() if item.decided_by else ""
        state = one.write.state if one.write else "not written"
        lines.append(f"  - **Outcome:** {decided} — approved by {by}; GitHub write: {state}")
    elif item.status == AgendaItem.Status.ROLLED_OVER:
        lines.append("  - **Outcome:** not reached; rolled over to the next meeting")
    else:
        lines.append("  - **Outcome:** not reached yet")
    return lines
