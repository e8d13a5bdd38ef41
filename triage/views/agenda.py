"""The triage-review meeting: the list of meetings, one meeting's agenda, its Markdown notes and
the facilitator's outcomes."""

from __future__ import annotations

import re
from datetime import date
from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from triage import agenda
from triage.forms import AgendaPageForm
from triage.models import AgendaItem, Meeting
from triage.roles import decides_somewhere, may_decide, queues_decided_by
from triage.rubric.loader import known_labels
from triage.tasks import send_write_on_commit

if TYPE_CHECKING:
    from triage.views import HtmxHttpRequest

ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _parse_day(day: str) -> date | None:
    # date.fromisoformat also takes 20261124 and 2026-W48-2: the URL has one spelling only.
    if not ISO_DAY.match(day):
        return None
    try:
        return date.fromisoformat(day)
    except ValueError:
        return None


def _get_meeting_or_404(day: str) -> Meeting:
    parsed = _parse_day(day)
    if parsed is None:
        raise Http404("Not a date: use YYYY-MM-DD.")
    return get_object_or_404(Meeting, date=parsed)


def _get_meeting_to_change(request: HtmxHttpRequest, day: str) -> Meeting:
    """404 for a meeting that does not exist, 403 for a user who may only read."""
    meeting = _get_meeting_or_404(day)
    if not decides_somewhere(request.user):
        raise PermissionDenied("Only oncalls may change the agenda.")
    return meeting


def _get_item_or_404(meeting: Meeting, pk: int) -> AgendaItem:
    found = agenda.items(meeting).filter(pk=pk).first()
    if found is None:
        raise Http404("No such item on this meeting's agenda.")
    return found


def _get_item_to_decide(request: HtmxHttpRequest, day: str, pk: int) -> AgendaItem:
    meeting = _get_meeting_or_404(day)
    item = _get_item_or_404(meeting, pk)
    if not _may_decide_item(request, item):
        raise PermissionDenied("Only the oncalls of this item's queue may record its outcome.")
    return item


def _may_decide_item(request: HtmxHttpRequest, item: AgendaItem) -> bool:
    # An item from no queue (escalated before queues, or its queue deleted): any oncall.
    if item.queue is None:
        return decides_somewhere(request.user)
    return may_decide(request.user, item.queue)


def _deciding(request: HtmxHttpRequest) -> dict[str, Any]:
    """What the meeting's templates need to show an item's controls only to its deciders."""
    queue_ids = set(queues_decided_by(request.user).values_list("pk", flat=True))
    return {"can_decide": bool(queue_ids), "deciding_queue_ids": queue_ids}


def _wants_partial(request: HtmxHttpRequest) -> bool:
    # A boosted request is a page navigation: it needs the whole page, not a fragment.
    return bool(request.htmx) and not request.htmx.boosted


def _meeting_url(meeting: Meeting) -> str:
    return reverse("meeting", args=[meeting.date.isoformat()])


@require_http_methods(["GET", "POST"])
def meetings(request: HtmxHttpRequest) -> HttpResponse:
    """Every meeting, newest first; an oncall opens the meeting of a date here (POST)."""
    error = ""
    status = 200
    confirm = False
    if request.method == "POST":
        if not decides_somewhere(request.user):
            raise PermissionDenied("Only oncalls may open a meeting.")
        day = _parse_day(request.POST.get("date", "").strip())
        today = timezone.localdate()
        if day is None:
            error, status = "Give the meeting's date as YYYY-MM-DD.", 422
        elif (
            abs((day - today).days) > agenda.CONFIRM_BEYOND_DAYS
            and request.POST.get("confirm") != "yes"
        ):
            # A new meeting takes every open item: a typo of a year must not move them all.
            days = abs((day - today).days)
            error, status, confirm = (
                f"{day.isoformat()} is {days} days from today. Tick “I mean this date” to open it.",
                422,
                True,
            )
        else:
            try:
                meeting = agenda.open_meeting(day)
                if agenda.is_current(meeting):
                    agenda.build(meeting)
            except agenda.AgendaError as exc:
                error, status = str(exc), 422
            else:
                return redirect(_meeting_url(meeting))
    listed = Meeting.objects.annotate(
        total=Count("items"),
        open=Count("items", filter=Q(items__status=AgendaItem.Status.OPEN)),
        decided=Count("items", filter=Q(items__status=AgendaItem.Status.DECIDED)),
        rolled=Count("items", filter=Q(items__status=AgendaItem.Status.ROLLED_OVER)),
    ).order_by("-date")
    context = {
        "meetings": listed,
        "today": timezone.localdate(),
        "default_day": request.POST.get("date")
        or agenda.suggested_day(timezone.localdate()).isoformat(),
        "error": error,
        "confirm": confirm,
    }
    return render(request, "triage/meetings.html", context, status=status)


def _agenda_context(
    request: HtmxHttpRequest, meeting: Meeting, after: AgendaItem | None = None
) -> dict[str, Any]:
    shown, next_after = agenda.page(meeting, after)
    return {
        "meeting": meeting,
        "day": meeting.date.isoformat(),
        "groups": agenda.grouped(shown),
        "total": meeting.items.count(),
        "paged": after is not None,
        "next_after": next_after,
        "current": agenda.is_current(meeting),
        "previous": agenda.previous_meeting(meeting),
        "known_labels": sorted(known_labels()),
        "outcomes": AgendaItem.Outcome.choices,
        **_deciding(request),
    }


@require_GET
def meeting(request: HtmxHttpRequest, day: str) -> HttpResponse:
    found = _get_meeting_or_404(day)
    form = AgendaPageForm(request.GET)
    if not form.is_valid():
        return HttpResponseBadRequest("added and after must be numbers.")
    after = None
    if form.cleaned_data["after"] is not None:
        after = found.items.select_related("issue").filter(pk=form.cleaned_data["after"]).first()
        if after is None:
            return HttpResponseBadRequest("after names no item of this meeting.")
    context = _agenda_context(request, found, after)
    if form.cleaned_data["added"] is not None:
        context["added"] = form.cleaned_data["added"]
    return render(request, "triage/meeting.html", context)


@require_POST
def refresh(request: HtmxHttpRequest, day: str) -> HttpResponse:
    """Add what came up since the agenda was last built."""
    found = _get_meeting_to_change(request, day)
    try:
        added = agenda.build(found)
    except agenda.AgendaError as exc:
        context = _agenda_context(request, found) | {"error": str(exc)}
        template = (
            "triage/meeting.html#agenda" if _wants_partial(request) else "triage/meeting.html"
        )
        return render(request, template, context, status=409)
    if _wants_partial(request):
        context = _agenda_context(request, found) | {"added": added}
        return render(request, "triage/meeting.html#agenda", context)
    return redirect(f"{_meeting_url(found)}?added={added}")


@require_GET
def markdown(request: HtmxHttpRequest, day: str) -> HttpResponse:
    found = _get_meeting_or_404(day)
    response = HttpResponse(agenda.as_markdown(found), content_type="text/markdown; charset=utf-8")
    response["Content-Disposition"] = f'inline; filename="triage-review-{found.date}.md"'
    return response


def _item_context(request: HtmxHttpRequest, item: AgendaItem) -> dict[str, Any]:
    return {
        "entry": agenda.entry(item),
        "meeting": item.meeting,
        "day": item.meeting.date.isoformat(),
        "current": agenda.is_current(item.meeting),
        # The label datalist is the page's: a swapped-in item refers to it.
        "outcomes": AgendaItem.Outcome.choices,
        **_deciding(request),
    }


@require_http_methods(["GET", "POST"])
def outcome(request: HtmxHttpRequest, day: str, pk: int) -> HttpResponse:
    """GET: the item (its write's state is polled here). POST: record the approved outcome, or
    retry its failed write."""
    if request.method == "GET":
        found = _get_item_or_404(_get_meeting_or_404(day), pk)
        if not _wants_partial(request):
            return redirect(f"{_meeting_url(found.meeting)}#item-{found.pk}")
        return render(request, "triage/meeting.html#item", _item_context(request, found))

    item = _get_item_to_decide(request, day, pk)
    status = 200
    error = ""
    if request.POST.get("action") == "retry":
        retried = agenda.retry(item)
        if retried is not None:
            send_write_on_commit(retried.pk)
    else:
        try:
            made = agenda.record(
                item,
                request.user,
                outcome=request.POST.get("outcome", ""),
                owner=request.POST.get("owner", ""),
                add_labels=request.POST.getlist("add"),
                remove_labels=request.POST.getlist("remove"),
                note=request.POST.get("note", ""),
            )
        except agenda.AgendaError as exc:
            error, status = str(exc), 422
        else:
            if made is None:
                error, status = "This item was already decided or rolled over.", 409
            else:
                send_write_on_commit(made.write.pk)
    if status == 200 and not _wants_partial(request):
        return redirect(f"{_meeting_url(item.meeting)}#item-{item.pk}")
    # Re-read: the write may already have been applied (tasks in-process) since it was queued.
    fresh = _get_item_or_404(item.meeting, item.pk)
    context = _item_context(request, fresh) | {
        "error": error,
        "error_item": fresh.pk,
        "posted": request.POST,
    }
    if _wants_partial(request):
        return render(request, "triage/meeting.html#item", context, status=status)
    page = _agenda_context(request, fresh.meeting) | {
        "error_item": fresh.pk,
        "error": error,
        "posted": request.POST,
    }
    return render(request, "triage/meeting.html", page, status=status)
