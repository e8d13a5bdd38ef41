from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from triage import rotation
from triage.models import Queue
from triage.signin.handles import handles, user_for_handle

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser
    from django.http import HttpResponse

    from triage.views import HtmxHttpRequest


def _get_queue(slug: str) -> Queue:
    return get_object_or_404(Queue, slug=slug)


def _get_queue_to_plan(request: HtmxHttpRequest, slug: str) -> Queue:
    """404 for an unknown queue, 403 for anyone but an admin: admins plan the rotation."""
    queue = _get_queue(slug)
    if not request.user.is_staff:
        raise PermissionDenied("Only admins edit the rotation.")
    return queue


def _day(value: str) -> date | None:
    try:
        return date.fromisoformat(value)
    except ValueError:
        return None


def _user(name: str) -> AbstractBaseUser | None:
    return user_for_handle(name)


@require_GET
def schedule(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    queue = _get_queue(slug)
    weeks = rotation.schedule(queue)
    active = get_user_model().objects.filter(is_active=True).values_list("pk", flat=True)
    named = handles([week.oncall_id for _, week in weeks if week is not None])
    context = {
        "queue": queue,
        "weeks": [(day, week, named.get(week.oncall_id) if week else None) for day, week in weeks],
        "this_week": rotation.current_week(),
        "stats": rotation.stats(queue),
        "time_zone": rotation.zone().key,
        "people": sorted(handles(active).values(), key=str.lower),
        "can_plan": request.user.is_staff,
    }
    return render(request, "triage/rotation.html", context)


@require_POST
def assign(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    queue = _get_queue_to_plan(request, slug)
    week = _day(request.POST.get("week", ""))
    user = _user(request.POST.get("oncall", ""))
    if week is None or user is None:
        messages.error(request, "Give a week (YYYY-MM-DD) and someone's GitHub handle.")
    else:
        rotation.assign(queue, week, user)
    return redirect("rotation", slug=queue.slug)


@require_POST
def generate(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    queue = _get_queue_to_plan(request, slug)
    names = [name for name in request.POST.get("people", "").replace(",", " ").split() if name]
    people = [_user(name) for name in names]
    first = _day(request.POST.get("first_week", ""))
    weeks = request.POST.get("weeks", "")
    if not names or None in people:
        messages.error(request, "List people's GitHub handles, separated by commas or spaces.")
    elif first is None or not weeks.isdigit() or not 1 <= int(weeks) <= 104:
        messages.error(request, "Give the first week (YYYY-MM-DD) and 1 to 104 weeks.")
    else:
        rotation.round_robin(queue, people, first, int(weeks))  # type: ignore[arg-type]
    return redirect("rotation", slug=queue.slug)


@require_POST
def swap(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    queue = _get_queue_to_plan(request, slug)
    first, second = _day(request.POST.get("first", "")), _day(request.POST.get("second", ""))
    if first is None or second is None:
        messages.error(request, "Give two weeks (YYYY-MM-DD).")
    else:
        try:
            rotation.swap(queue, first, second)
        except ValueError as exc:
            messages.error(request, str(exc))
    return redirect("rotation", slug=queue.slug)


@require_POST
def handoff(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    queue = _get_queue(slug)
    week = rotation.write_handoff(queue, request.user, request.POST.get("note", ""))  # type: ignore[arg-type]
    if week is None:
        raise PermissionDenied("Only this week's oncall writes the handoff note.")
    messages.success(request, "Handoff note saved for next week's oncall.")
    return redirect("inbox", slug=queue.slug)
