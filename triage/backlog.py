"""A queue's pending proposals in the inbox's order, a page at a time.

Pages are cut by key, not by offset: the page after a proposal starts right after its sort key,
so every page costs one index range scan however deep the backlog, and a decision taken
meanwhile does not shift the next page.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from functools import reduce
from operator import or_
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet
from django.utils import timezone

from triage.models import Decision, Proposal, with_label

if TYPE_CHECKING:
    from triage.models import Queue

# (field, descending) pairs; the last one is unique, so the order is total.
ORDERS: dict[str, tuple[tuple[str, bool], ...]] = {
    "newest": (("issue_created_at", True), ("pk", True)),
    "confidence": (("score", False), ("issue_created_at", True), ("pk", True)),
}
DEFAULT_ORDER = "newest"
# The inbox lists many issues: never load their bodies and comments, which can be megabytes.
HEAVY_ISSUE_FIELDS = ("issue__body", "issue__comments")
# What an inbox row shows: a proposal's citations, rationale and the issue's text stay behind.
ROW_FIELDS = (
    "queue_id",
    "status",
    "tier",
    "score",
    "add_labels",
    "remove_labels",
    "comment_template",
    "comment_body",
    "close",
    "issue_created_at",
    "created_at",
    "issue__number",
    "issue__title",
    "issue__created_at",
    "issue__repository",
)


def _order_by(order: str, *, reverse: bool = False) -> list[str]:
    return [f"-{field}" if descending != reverse else field for field, descending in ORDERS[order]]


def pending(queue: Queue, order: str, chosen: Filters | None = None) -> QuerySet[Proposal]:
    rows = Proposal.objects.filter(queue=queue, status=Proposal.Status.PENDING)
    return (chosen.apply(rows) if chosen else rows).order_by(*_order_by(order))


@dataclass(frozen=True)
class Filters:
    """What the oncall narrowed the inbox to; empty fields do not narrow it."""

    text: str = ""
    label: str = ""
    author: str = ""
    max_age_days: int | None = None
    tier: str = ""
    changes_only: bool = False

    def __bool__(self) -> bool:
        return any(
            (self.text, self.label, self.author, self.max_age_days, self.tier, self.changes_only)
        )

    def apply(self, rows: QuerySet[Proposal]) -> QuerySet[Proposal]:
        if self.text:
            rows = rows.filter(
                Q(issue__title__icontains=self.text) | Q(issue__body__icontains=self.text)
            )
        if self.author:
            rows = rows.filter(issue__author__iexact=self.author)
        if self.max_age_days is not None:
            rows = rows.filter(
                issue_created_at__gte=timezone.now() - timedelta(days=self.max_age_days)
            )
        if self.tier:
            rows = rows.filter(tier=self.tier)
        if self.changes_only:
            rows = rows.exclude(add_labels=[], remove_labels=[], comment_body="", close=False)
        if self.label:
            rows = with_label(rows, "issue__labels", self.label)
        return rows

    def any_tier(self) -> Filters:
        return replace(self, tier="")


def tier_counts(queue: Queue, chosen: Filters) -> dict[str, int]:
    """How many pending proposals each tier would show with the other filters as they are."""
    rows = chosen.any_tier().apply(
        Proposal.objects.filter(queue=queue, status=Proposal.Status.PENDING)
    )
    return dict(rows.values_list("tier").annotate(n=Count("pk")).order_by())


def _beyond(order: str, proposal: Proposal, *, reverse: bool = False) -> Q:
    """Rows after `proposal` in the order (before it, with `reverse`)."""
    keys = ORDERS[order]
    alternatives = []
    for index, (field, descending) in enumerate(keys):
        equal = {name: getattr(proposal, name) for name, _ in keys[:index]}
        lookup = "lt" if descending != reverse else "gt"
        alternatives.append(Q(**equal, **{f"{field}__{lookup}": getattr(proposal, field)}))
    # The same bound on the first key alone, redundant but plain: it lets the database start an
    # index range scan there, where the OR of the alternatives alone makes it read them all.
    first, descending = keys[0]
    bound = Q(**{f"{first}__{'lte' if descending != reverse else 'gte'}": getattr(proposal, first)})
    return bound & reduce(or_, alternatives)


def page(
    queue: Queue, order: str, after: Proposal | None = None, chosen: Filters | None = None
) -> tuple[list[Proposal], Proposal | None]:
    """A page of pending proposals (after `after`), and the last one if more follow."""
    rows = pending(queue, order, chosen).select_related("issue").only(*ROW_FIELDS)
    if after is not None:
        rows = rows.filter(_beyond(order, after))
    size = settings.TRIAGE_PAGE_SIZE
    proposals = list(rows[: size + 1])
    more = len(proposals) > size
    proposals = proposals[:size]
    return proposals, (proposals[-1] if more else None)


# Counting stops here: "1,000+ left" says what an oncall needs, and counting a backlog of
# 100,000 costs more than the rest of the page.
COUNT_UP_TO = 1000


def left(queue: Queue, chosen: Filters | None = None) -> int:
    """How many proposals are pending in the queue (that the filters show), up to
    COUNT_UP_TO + 1."""
    rows = Proposal.objects.filter(queue=queue, status=Proposal.Status.PENDING)
    if chosen:
        rows = chosen.apply(rows)
    return rows.values("pk")[: COUNT_UP_TO + 1].count()


def neighbours(proposal: Proposal, order: str) -> tuple[int | None, int | None, int]:
    """The pending proposals before and after this one in the inbox order, and how many are
    pending in all (see `left`). A proposal no longer pending has no previous, and the first is
    its next."""
    rows = pending(proposal.queue, order)
    left_count = left(proposal.queue)
    if proposal.status != Proposal.Status.PENDING:
        return None, rows.values_list("pk", flat=True).first(), left_count
    following = rows.filter(_beyond(order, proposal)).values_list("pk", flat=True).first()
    previous = (
        rows.filter(_beyond(order, proposal, reverse=True))
        .order_by(*_order_by(order, reverse=True))
        .values_list("pk", flat=True)
        .first()
    )
    return previous, following, left_count


def decided_untriaged(queue: Queue, before: int | None = None) -> tuple[list[Proposal], int | None]:
    """Issues a human decided here that are still in the queue on GitHub (a rejection, or an
    approval that changed nothing that takes them out), newest decision first, a page at a
    time; and where the next page starts. They come back to the inbox if they change."""
    size = settings.TRIAGE_PAGE_SIZE
    rows = (
        Proposal.objects.filter(queue=queue, status=Proposal.Status.DECIDED)
        # Back in the inbox (pending again in this queue): not listed here. One subquery, so
        # that both conditions hold for the same proposal.
        .exclude(
            Exists(
                Proposal.objects.filter(
                    issue=OuterRef("issue"), queue=queue, status=Proposal.Status.PENDING
                )
            )
        )
        .select_related("issue")
        .defer(*HEAVY_ISSUE_FIELDS)
        .prefetch_related(
            Prefetch(
                "decisions",
                queryset=Decision.objects.select_related("decided_by").order_by("-decided_at"),
            )
        )
        .order_by("-pk")
    )
    found: list[Proposal] = []
    # Whether an issue is still in the queue is read from its labels: a chunk at a time.
    while len(found) <= size:
        chunk = list((rows.filter(pk__lt=before) if before else rows)[:CHUNK])
        found += [p for p in chunk if queue.matches(p.issue.labels, p.issue.state)]
        if len(chunk) < CHUNK:
            break
        before = chunk[-1].pk
    return found[:size], (found[size - 1].pk if len(found) > size else None)


CHUNK = 500
