from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import authenticate, login
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Prefetch, Sum
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import push_url

from triage import backlog, outbox, presence, rotation
from triage.decisions import DecisionError, parse_decision
from triage.forms import (
    BulkAcceptForm,
    DuplicateForm,
    IdListField,
    InboxPageForm,
    PageAfterForm,
)
from triage.models import AgendaItem, Decision, Issue, Proposal, Queue, RotationWeek, Write
from triage.proposing import spent_today
from triage.roles import decides_somewhere, may_decide
from triage.rubric import loader
from triage.signin.handles import handle
from triage.similar import finding
from triage.spreadsheets import streamed_csv
from triage.tasks import add_escalation_to_agenda, send_write_on_commit, sync_queue

if TYPE_CHECKING:
    from collections.abc import Iterator

    from triage.views import HtmxHttpRequest


def _get_queue(slug: str) -> Queue:
    return get_object_or_404(Queue, slug=slug)


def _get_queue_to_decide(request: HtmxHttpRequest, slug: str) -> Queue:
    """404 for a queue that does not exist, 403 for a user who may only read."""
    queue = _get_queue(slug)
    if not may_decide(request.user, queue):
        raise PermissionDenied("Only this queue's oncalls may decide here.")
    return queue


def _get_proposal_to_decide(request: HtmxHttpRequest, pk: int) -> Proposal:
    """404 for a proposal that does not exist, 403 for a user who may only read."""
    proposal = get_object_or_404(Proposal.objects.select_related("issue", "queue"), pk=pk)
    if not may_decide(request.user, proposal.queue):
        raise PermissionDenied("Only this queue's oncalls may decide here.")
    return proposal


def _get_write_to_retry(request: HtmxHttpRequest, pk: int) -> Write:
    # A meeting outcome's write is retried from the meeting's page.
    write = get_object_or_404(
        Write.objects.select_related("decision__proposal__queue"), pk=pk, decision__isnull=False
    )
    assert write.decision is not None
    if not may_decide(request.user, write.decision.proposal.queue):
        raise PermissionDenied("Only this queue's oncalls may retry its writes.")
    return write


def _get_write_to_undo(request: HtmxHttpRequest, pk: int) -> Write:
    """404 for an unknown write; 403 unless the user decides in its queue (any queue, for a
    meeting outcome on an issue of no queue)."""
    write = get_object_or_404(
        Write.objects.select_related(
            "decision__proposal__queue", "outcome__meeting", "outcome__queue"
        ),
        pk=pk,
    )
    if write.decision is not None:
        allowed = may_decide(request.user, write.decision.proposal.queue)
    elif write.outcome is not None and write.outcome.queue is not None:
        allowed = may_decide(request.user, write.outcome.queue)
    else:
        allowed = decides_somewhere(request.user)
    if not allowed:
        raise PermissionDenied("Only this queue's oncalls may undo its decisions.")
    return write


def _order(request: HttpRequest) -> str:
    form = InboxPageForm(request.GET)
    return form.cleaned_data["order"] if form.is_valid() else backlog.DEFAULT_ORDER


@login_not_required
@require_POST
def demo_login(request: HttpRequest) -> HttpResponse:
    """One button for the embedded demo; absent (404) anywhere else."""
    if not settings.TRIAGE_DEMO:
        raise Http404
    user = authenticate(request, username="oncall", password="oncall")
    if user is None:
        raise Http404
    login(request, user)
    return redirect("home")


@require_GET
def home(request: HtmxHttpRequest) -> HttpResponse:
    # An oncall lands on the queue of their week; "?all" shows every queue.
    mine = rotation.my_queue(request.user)
    if mine is not None and "all" not in request.GET:
        return redirect("inbox", slug=mine.slug)
    queues = list(Queue.objects.all())
    counts = {
        row["queue"]: row["n"]
        for row in Proposal.objects.filter(status=Proposal.Status.PENDING)
        .values("queue")
        .annotate(n=Count("pk"))
    }
    return render(
        request,
        "triage/home.html",
        {"queues": [(queue, counts.get(queue.pk, 0)) for queue in queues]},
    )


@require_GET
def inbox(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    queue = _get_queue(slug)
    form = InboxPageForm(request.GET)
    if not form.is_valid():
        return HttpResponseBadRequest("Unknown order, filter or page.")
    after = None
    if form.cleaned_data["cursor"] is not None:
        after = Proposal.objects.filter(pk=form.cleaned_data["cursor"], queue=queue).first()
        if after is None:
            return HttpResponseBadRequest("That page's position is not in this queue.")
    context = _inbox_context(request, queue, form.cleaned_data["order"], after, form)
    if request.htmx and request.htmx.target == "inbox-body":
        # Active search: only the list changes, the field being typed in stays as it is.
        return render(request, "triage/inbox.html#inbox-body", context)
    return render(request, "triage/inbox.html", context)


# The writes of the last bulk acceptance, kept in the session for its one undo.
BULK_UNDO = "bulk-undo"


def _bulk_selection(request: HtmxHttpRequest, queue: Queue) -> list[Proposal] | None:
    """The pending proposals of the queue chosen in the request, or None if the request is bad."""
    data = request.POST if request.method == "POST" else request.GET
    form = BulkAcceptForm(data)
    filters = InboxPageForm(data)
    if not form.is_valid() or not filters.is_valid():
        return None
    chosen = backlog.pending(queue, backlog.DEFAULT_ORDER).select_related("issue")
    wanted = set(form.cleaned_data["p"])
    if form.cleaned_data["high"]:
        high = backlog.pending(queue, filters.cleaned_data["order"], filters.filters())
        wanted |= set(
            high.filter(tier=Proposal.Tier.HIGH).values_list("pk", flat=True)[: IdListField.MAX]
        )
    return list(chosen.filter(pk__in=wanted).defer(*backlog.HEAVY_ISSUE_FIELDS))


def _bulk_waiting(request: HtmxHttpRequest, queue: Queue) -> list[int]:
    """The writes of this user's last bulk acceptance in this queue that can still be undone."""
    batch = request.session.get(BULK_UNDO)
    if not isinstance(batch, dict) or batch.get("queue") != queue.slug:
        return []
    return list(
        Write.objects.filter(
            pk__in=batch.get("writes", []),
            state=Write.State.QUEUED,
            attempts=0,
            due_at__gt=timezone.now(),
        ).values_list("pk", flat=True)
    )


@require_GET
def bulk_preview(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """Every change accepting the selected proposals would write, and one button to do it."""
    queue = _get_queue_to_decide(request, slug)
    chosen = _bulk_selection(request, queue)
    if chosen is None:
        return HttpResponseBadRequest("Select pending issues of this queue to accept.")
    context = {"queue": queue, "chosen": chosen, "order": _order(request)}
    return render(request, "triage/bulk.html", context)


@require_POST
def bulk_accept(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    queue = _get_queue_to_decide(request, slug)
    chosen = _bulk_selection(request, queue)
    if chosen is None:
        return HttpResponseBadRequest("Select pending issues of this queue to accept.")
    made = outbox.accept_all(chosen, request.user)
    writes = [decision.write.pk for decision in made]
    for write_id in writes:
        send_write_on_commit(write_id)
    request.session[BULK_UNDO] = {"queue": queue.slug, "writes": writes}
    skipped = len(chosen) - len(made)
    note = f" {skipped} had been decided meanwhile and were left as they were." if skipped else ""
    messages.success(request, f"Accepted {len(made)} proposal{pluralize(len(made))}.{note}")
    return redirect(f"{reverse('inbox', args=[queue.slug])}?order={_order(request)}")


@require_POST
def bulk_undo(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """One undo for the last bulk acceptance: every write still in its window is withdrawn."""
    queue = _get_queue_to_decide(request, slug)
    batch = request.session.pop(BULK_UNDO, None)
    writes = batch.get("writes", []) if isinstance(batch, dict) else []
    undone = sum(outbox.undo(write) for write in Write.objects.filter(pk__in=writes))
    late = len(writes) - undone
    messages.success(
        request,
        f"Undid {undone} acceptance{pluralize(undone)}."
        + (f" {late} had already been sent to GitHub." if late else ""),
    )
    return redirect("inbox", slug=queue.slug)


@require_GET
def presence_ping(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The issue page, still open, says so; the answer is who else has it open."""
    proposal = get_object_or_404(Proposal.objects.only("pk"), pk=pk)
    presence.here(request.user.get_username(), proposal.pk)
    context = {
        "proposal": proposal,
        "viewers": presence.others([proposal.pk], request.user.get_username()).get(proposal.pk, []),
        "presence_ping_seconds": presence.PING_SECONDS,
    }
    return render(request, "triage/issue.html#presence", context)


@require_GET
def decided(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """Decided here, still untriaged on GitHub: findable, and back in the inbox if it changes."""
    queue = _get_queue(slug)
    form = PageAfterForm(request.GET)
    if not form.is_valid():
        return HttpResponseBadRequest("after must be a proposal's number.")
    rows, next_after = backlog.decided_untriaged(queue, form.cleaned_data["after"])
    context = {
        "queue": queue,
        "rows": rows,
        "next_after": next_after,
        "paged": form.cleaned_data["after"] is not None,
    }
    return render(request, "triage/decided.html", context)


def _inbox_context(
    request: HtmxHttpRequest,
    queue: Queue,
    order: str,
    after: Proposal | None = None,
    form: InboxPageForm | None = None,
) -> dict[str, object]:
    chosen = form.filters() if form is not None else backlog.Filters()
    proposals, last = backlog.page(queue, order, after, chosen)
    filter_query = {
        key: value
        for key, value in (form.cleaned_data if form is not None else {}).items()
        if key not in ("cursor", "order") and value not in ("", None, False)
    }
    if filter_query.get("changes"):
        filter_query["changes"] = "on"
    return {
        "queue": queue,
        "proposals": proposals,
        "order": order,
        "left": backlog.left(queue, chosen),
        "filtered": bool(chosen),
        "filter_form": form if form is not None else InboxPageForm(),
        "filter_query": urlencode(filter_query),
        # Counting every pending proposal by tier costs more than the page at 100,000: only
        # once the list is narrowed.
        "tier_counts": backlog.tier_counts(queue, chosen) if chosen else {},
        "viewing": presence.others([p.pk for p in proposals], request.user.get_username()),
        "can_decide": may_decide(request.user, queue),
        "bulk_undo": _bulk_waiting(request, queue),
        "vocabulary": sorted(loader.load(queue.rubric).vocabulary.allowed),
        "paged": after is not None,
        "next_cursor": last.pk if last is not None else None,
        "page_size": settings.TRIAGE_PAGE_SIZE,
        "poll_seconds": settings.TRIAGE_INBOX_POLL_SECONDS,
        # What the list polls to follow others' decisions: this page, whatever request drew it.
        "poll_url": reverse("inbox", args=[queue.slug])
        + "?"
        + urlencode({"order": order, **filter_query, **({"cursor": after.pk} if after else {})}),
        "spend": _spend(queue),
    } | _week_context(request, queue, proposals)


def _week_context(
    request: HtmxHttpRequest, queue: Queue, proposals: list[Proposal]
) -> dict[str, object]:
    """What the rotation adds to an inbox: markers for everyone, reminders for the week's oncall."""
    carried = rotation.carried_over(proposals)
    on_duty = RotationWeek.objects.filter(
        queue=queue, week_start=rotation.current_week(), oncall_id=request.user.pk
    ).first()
    handoff = rotation.take_handoff(queue, request.user) if on_duty else None
    return {
        "carried": carried,
        "stale": rotation.stale(queue, proposals),
        "on_duty": on_duty,
        "handoff": handoff,
        "handoff_from": handle(handoff.oncall) if handoff is not None else "",
    }


def _spend(queue: Queue) -> dict[str, Decimal]:
    if not queue.asks_claude:
        return {}
    month = timezone.now() - timedelta(days=30)
    total = Proposal.objects.filter(queue=queue, created_at__gte=month).aggregate(s=Sum("cost_usd"))
    return {"today": spent_today(queue), "month": total["s"] or Decimal(0)}


@require_GET
def sync_status(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    queue = _get_queue(slug)
    context = {"queue": queue, "can_decide": may_decide(request.user, queue)}
    return render(request, "triage/inbox.html#sync-status", context)


@require_POST
def start_sync(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    queue = _get_queue(slug)
    if not may_decide(request.user, queue):
        raise PermissionDenied("Only this queue's oncalls may start a sync.")
    sync_queue.delay_on_commit(queue.pk)
    if request.htmx:
        queue.refresh_from_db()
        context = {"queue": queue, "requested": True, "can_decide": True}
        return render(request, "triage/inbox.html#sync-status", context)
    return redirect("inbox", slug=queue.slug)


# The rubric template an oncall proposes for a possible duplicate (`d` on the issue page).
DUPLICATE_TEMPLATE = "duplicate"


def _issue_context(request: HtmxHttpRequest, proposal: Proposal, order: str) -> dict[str, Any]:
    issue = proposal.issue
    previous, following, left = backlog.neighbours(proposal, order)
    rubric = loader.load(proposal.queue.rubric)
    decisions = list(
        Decision.objects.filter(proposal__issue=issue, proposal__queue=proposal.queue)
        .select_related("write", "decided_by")
        .order_by("-decided_at")[:1]
    )
    latest = decisions[0] if decisions else None
    after = request.GET.get("after", "")
    previous_decision = None
    if after.isdigit():
        previous_decision = (
            Decision.objects.select_related("write", "proposal__issue")
            .filter(pk=int(after))
            .first()
        )
    # The issue may be pending in another queue too (a PT2-D issue is pt2's and distributed's).
    elsewhere = list(
        Proposal.objects.filter(issue=issue, status=Proposal.Status.PENDING)
        .exclude(queue=proposal.queue)
        .select_related("queue")
        .only("pk", "queue__slug", "queue__name")
    )
    similar = finding.shown_for(issue)
    return {
        "proposal": proposal,
        "issue": issue,
        "queue": proposal.queue,
        "similar": similar,
        "duplicate_of": next((row for row in similar if row.possible_duplicate), None),
        "duplicate_template": rubric.templates.get(DUPLICATE_TEMPLATE),
        "order": order,
        "previous_id": previous,
        "next_id": following,
        "left": left,
        "elsewhere": elsewhere,
        "viewers": presence.others([proposal.pk], request.user.get_username()).get(proposal.pk, []),
        "presence_ping_seconds": presence.PING_SECONDS,
        "changed_since": proposal.changed_since(),
        "latest_decision": latest,
        "decided_by_another": (
            latest is not None
            and not proposal.is_pending
            and latest.decided_by_id != request.user.pk
        ),
        "previous_decision": previous_decision,
        "vocabulary": sorted(rubric.vocabulary.allowed),
        "templates": rubric.templates,
        "sections": rubric.sections,
        "can_decide": may_decide(request.user, proposal.queue),
    }


@require_GET
def proposal_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    proposal = get_object_or_404(Proposal.objects.select_related("issue", "queue"), pk=pk)
    if proposal.status == Proposal.Status.SUPERSEDED:
        current = (
            Proposal.objects.filter(issue=proposal.issue, queue=proposal.queue)
            .exclude(status=Proposal.Status.SUPERSEDED)
            .order_by("-pk")
            .first()
        )
        if current:
            return redirect(f"{reverse('proposal', args=[current.pk])}?order={_order(request)}")
    presence.here(request.user.get_username(), proposal.pk)
    context = _issue_context(request, proposal, _order(request))
    pending = request.session.pop(PENDING_DECISION, None)
    if isinstance(pending, dict) and pending.get("proposal") == proposal.pk:
        context["draft"] = _draft(pending.get("fields") or {})
    elif "duplicate" in request.GET:
        draft = _duplicate_draft(request, context)
        if draft is None:
            return HttpResponseBadRequest("duplicate must be one of this issue's similar issues.")
        context["draft"] = draft
    return render(request, "triage/issue.html", context)


def _duplicate_draft(request: HtmxHttpRequest, context: dict[str, Any]) -> dict[str, Any] | None:
    """The edit form filled in to propose the rubric's duplicate comment: the proposal's
    labels as they are, the template's text after GitHub's "Duplicate of #N" line."""
    form = DuplicateForm(request.GET)
    template = context["duplicate_template"]
    proposal: Proposal = context["proposal"]
    if not form.is_valid() or template is None:
        return None
    number = form.cleaned_data["duplicate"]
    if not any(row.similar.number == number for row in context["similar"]):
        return None
    return _draft(
        {
            "kind": ["edit"],
            "add": list(proposal.add_labels),
            "remove": list(proposal.remove_labels),
            "comment": [f"Duplicate of #{number}\n\n{template.body.strip()}"],
            "note": [f"Possible duplicate of #{number}"],
        }
    ) | {"duplicate_of": number}


def _draft(fields: dict[str, list[str]]) -> dict[str, Any]:
    """A decision form as it was filled in, to show it again."""
    return {
        "kind": (fields.get("kind") or [""])[0],
        "add": [label for label in fields.get("add", []) if label],
        "remove": fields.get("remove", []),
        "comment": (fields.get("comment") or [""])[0],
        "close": bool(fields.get("close")),
        "note": (fields.get("note") or [""])[0],
    }


# A decision posted by a session that had ended waits here (in the new session) until the
# oncall, logged in again, is back on its issue with the form as it was.
PENDING_DECISION = "pending-decision"
DECISION_FIELDS = ("kind", "add", "remove", "comment", "close", "note")


@login_not_required
@require_POST
def decide(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    if not request.user.is_authenticated:
        # Keep what was typed: logging in again must not lose it (nor answer 405 on a GET).
        request.session[PENDING_DECISION] = {
            "proposal": pk,
            "fields": {
                key: [value[:5000] for value in request.POST.getlist(key)[:20]]
                for key in DECISION_FIELDS
            },
        }
        return redirect_to_login(f"{reverse('proposal', args=[pk])}?order={_order(request)}")
    proposal = _get_proposal_to_decide(request, pk)
    order = _order(request)
    try:
        fields = parse_decision(request.POST, proposal)
    except DecisionError as exc:
        return _refused(request, proposal, order, str(exc), status=422)
    _, following, _ = backlog.neighbours(proposal, order)
    made = outbox.decide(proposal, user=request.user, **fields)
    if made is None:
        earlier = (
            Decision.objects.filter(proposal=proposal)
            .select_related("decided_by")
            .order_by("-decided_at")
            .first()
        )
        reason = (
            f"Already decided: {earlier.summary()}"
            if earlier is not None
            else "This proposal was replaced by a newer one."
        )
        return _refused(request, proposal, order, reason, status=409)
    if made.kind != Decision.Kind.REJECT:
        send_write_on_commit(made.write.pk)
    if made.kind == Decision.Kind.ESCALATE:
        # The meeting's agenda shows it, and its note, without waiting for a refresh.
        add_escalation_to_agenda.delay_on_commit(made.pk)
    # Re-read: the write may already have been applied (tasks in-process) since it was created.
    decision = Decision.objects.select_related("write", "proposal__issue").get(pk=made.pk)
    if following is None:
        url = f"{reverse('inbox', args=[proposal.queue.slug])}?order={order}&after={decision.pk}"
    else:
        url = f"{reverse('proposal', args=[following])}?order={order}&after={decision.pk}"
    if request.htmx:
        # Answer with the next page itself: one round trip from the key press to the next issue.
        if following is None:
            response = inbox_after_decision(request, proposal.queue, order, decision)
        else:
            nxt = Proposal.objects.select_related("issue", "queue").get(pk=following)
            context = _issue_context(request, nxt, order) | {"previous_decision": decision}
            response = render(request, "triage/issue.html", context)
        return push_url(response, url)
    return redirect(url)


def _refused(
    request: HtmxHttpRequest, proposal: Proposal, order: str, reason: str, status: int
) -> HttpResponse:
    # The form comes back as it was filled in, to be corrected rather than typed again.
    typed = {key: request.POST.getlist(key)[:20] for key in DECISION_FIELDS}
    context = _issue_context(request, proposal, order) | {"error": reason, "draft": _draft(typed)}
    response = render(request, "triage/issue.html", context, status=status)
    # The page stays the issue's: the POST-only decide URL must not reach the address bar.
    return push_url(response, False) if request.htmx else response


def inbox_after_decision(
    request: HtmxHttpRequest, queue: Queue, order: str, decision: Decision
) -> HttpResponse:
    context = _inbox_context(request, queue, order) | {"previous_decision": decision}
    return render(request, "triage/inbox.html", context)


@require_GET
def write_status(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    decision = get_object_or_404(
        Decision.objects.select_related("write", "proposal__issue", "proposal__queue"), write__pk=pk
    )
    context = {
        "decision": decision,
        "can_decide": may_decide(request.user, decision.proposal.queue),
    }
    return render(request, "triage/issue.html#decision-card", context)


@require_POST
def undo_write(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Withdraw an approval's write within its undo window; the issue is back in the inbox."""
    write = _get_write_to_undo(request, pk)
    undone = outbox.undo(write)
    if write.outcome is not None:
        meeting_url = reverse("meeting", args=[write.outcome.meeting.date.isoformat()])
        return redirect(f"{meeting_url}#item-{write.outcome_id}")
    assert write.decision is not None
    if request.htmx:
        decision = Decision.objects.select_related("write", "proposal__issue").get(
            pk=write.decision.pk
        )
        context = {"decision": decision, "can_decide": True}
        response = render(request, "triage/issue.html#decision-card", context)
        if undone:
            # Back to the issue, with its proposal as it was.
            response["HX-Redirect"] = reverse("proposal", args=[write.decision.proposal_id])
        return response
    return redirect("proposal", pk=write.decision.proposal_id)


@require_POST
def retry_write(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    write = _get_write_to_retry(request, pk)
    if outbox.requeue(write):
        send_write_on_commit(write.pk)
    decision = Decision.objects.select_related("write", "proposal__issue").get(write__pk=pk)
    if request.htmx:
        context = {"decision": decision, "can_decide": True}
        return render(request, "triage/issue.html#decision-card", context)
    return redirect("history", pk=decision.proposal.issue_id)


@require_GET
def history(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    issue = get_object_or_404(Issue.objects.defer("body", "comments"), pk=pk)
    form = PageAfterForm(request.GET)
    if not form.is_valid():
        return HttpResponseBadRequest("after must be a proposal's number.")
    decisions = Decision.objects.select_related("decided_by", "write").order_by("decided_at")
    proposals = (
        Proposal.objects.filter(issue=issue)
        .select_related("queue")
        .prefetch_related(Prefetch("decisions", queryset=decisions))
        .order_by("pk")
    )
    # Proposals in the order they were made; an issue edited often has many: a page at a time.
    if form.cleaned_data["after"] is not None:
        proposals = proposals.filter(pk__gt=form.cleaned_data["after"])
    size = settings.TRIAGE_PAGE_SIZE
    shown = list(proposals[: size + 1])
    outcomes = (
        AgendaItem.objects.filter(issue=issue, decided_at__isnull=False)
        .select_related("meeting", "decided_by", "write")
        .order_by("decided_at")
    )
    context = {
        "issue": issue,
        "proposals": shown[:size],
        "next_after": shown[size - 1].pk if len(shown) > size else None,
        "paged": form.cleaned_data["after"] is not None,
        "outcomes": outcomes,
    }
    return render(request, "triage/history.html", context)


@require_GET
def rubric_detail(request: HtmxHttpRequest, name: str) -> HttpResponse:
    if name not in loader.available():
        raise Http404
    return render(request, "triage/rubric.html", {"rubric": loader.load(name)})


EXPORT_FIELDS = [
    "decision_id",
    "decided_at",
    "decided_by",
    "kind",
    "queue",
    "repository",
    "issue_number",
    "proposal_id",
    "proposer",
    "proposer_version",
    "rubric_version",
    "proposal_tier",
    "proposal_score",
    "proposed_add",
    "proposed_remove",
    "proposed_comment",
    "approved_add",
    "approved_remove",
    "approved_comment",
    "close",
    "note",
    "write_state",
    "write_sent",
]


# Where each exported field is read: plain values, as building six model instances a row cost
# more than the rest of the export.
EXPORT_SOURCES = {
    "decision_id": "pk",
    "decided_at": "decided_at",
    "decided_by": "decided_by__username",
    "kind": "kind",
    "queue": "proposal__queue__slug",
    "repository": "proposal__issue__repository",
    "issue_number": "proposal__issue__number",
    "proposal_id": "proposal_id",
    "proposer": "proposal__proposer",
    "proposer_version": "proposal__proposer_version",
    "rubric_version": "proposal__rubric_version",
    "proposal_tier": "proposal__tier",
    "proposal_score": "proposal__score",
    "proposed_add": "proposal__add_labels",
    "proposed_remove": "proposal__remove_labels",
    "proposed_comment": "proposal__comment_body",
    "approved_add": "add_labels",
    "approved_remove": "remove_labels",
    "approved_comment": "comment_body",
    "close": "close",
    "note": "note",
    "write_state": "write__state",
    "write_sent": "write__sent",
}


def _export_rows() -> Iterator[dict[str, Any]]:
    rows = Decision.objects.order_by("decided_at", "pk").values_list(
        *(EXPORT_SOURCES[field] for field in EXPORT_FIELDS)
    )
    for values in rows.iterator(chunk_size=2000):
        row = dict(zip(EXPORT_FIELDS, values, strict=True))
        row["decided_at"] = row["decided_at"].isoformat()
        # A decision without a write (a rejection) exports an empty state.
        row["write_state"] = row["write_state"] or ""
        row["write_sent"] = row["write_sent"] or {}
        yield row


@require_GET
def export_decisions(request: HtmxHttpRequest, fmt: str) -> HttpResponse | StreamingHttpResponse:
    if fmt == "jsonl":
        lines = (json.dumps(row, ensure_ascii=False) + "\n" for row in _export_rows())
        response = StreamingHttpResponse(lines, content_type="application/x-ndjson")
        response["Content-Disposition"] = 'attachment; filename="decisions.jsonl"'
        return response
    if fmt == "csv":
        rows = ([row[field] for field in EXPORT_FIELDS] for row in _export_rows())
        return streamed_csv("decisions.csv", EXPORT_FIELDS, rows)
    raise Http404
