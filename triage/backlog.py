"""A queue's pending proposals in the inbox's order, a page at a time.

Pages are cut by key, not by offset: the page after a proposal starts right after its sort key,
so every page costs one index range scan however deep the backlog, and a decision taken
meanwhile does not shift the next page.
"""

from __future__ import annotations

from functools import reduce
from operator import or_
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Q, QuerySet

from triage.models import Proposal

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


def _order_by(order: str, *, reverse: bool = False) -> list[str]:
    return [f"-{field}" if descending != reverse else field for field, descending in ORDERS[order]]


def pending(queue: Queue, order: str) -> QuerySet[Proposal]:
    return Proposal.objects.filter(queue=queue, status=Proposal.Status.PENDING).order_by(
        *_order_by(order)
    )


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
    queue: Queue, order: str, after: Proposal | None = None
) -> tuple[list[Proposal], Proposal | None]:
    """A page of pending proposals (after `after`), and the last one if more follow."""
    rows = pending(queue, order).select_related("issue").defer(*HEAVY_ISSUE_FIELDS)
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


def left(queue: Queue) -> int:
    """How many proposals are pending in the queue, up to COUNT_UP_TO + 1."""
    return (
        Proposal.objects.filter(queue=queue, status=Proposal.Status.PENDING)
        .values("pk")[: COUNT_UP_TO + 1]
        .count()
    )


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
