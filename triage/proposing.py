"""Keeping one current proposal per issue and queue, computed by workers from the queue's rubric."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from triage import claude
from triage.learning import loading
from triage.learning import proposer as learned_proposer
from triage.models import Issue, Proposal, Queue, Write
from triage.rubric import engine, loader

if TYPE_CHECKING:
    from triage.rubric.engine import Draft
    from triage.rubric.loader import Rubric


def issue_input(issue: Issue) -> engine.IssueInput:
    return issue.as_input()


# GitHub's clock and ours: a change this close after the console's own write is taken for it.
CLOCK_SLACK = timedelta(seconds=60)


def is_settled(issue: Issue, queue: Queue) -> bool:
    """A human decided the issue in this queue and nobody changed it on GitHub since: it is not
    proposed again. An issue that changed after the decision took effect (an edit, a comment, a
    label set by hand) is proposed afresh and comes back to the inbox. Until the decision's
    write has landed (or while it failed or conflicted, which a human sees on its card) it stays
    settled: the console's own change is not a reason to ask again."""
    decided = (
        Proposal.objects.filter(issue=issue, queue=queue, status=Proposal.Status.DECIDED)
        .order_by("-pk")
        .first()
    )
    if decided is None:
        return False
    if decided.input_hash == issue.content_hash:
        return True
    decision = decided.decisions.select_related("write").order_by("-decided_at").first()
    if decision is None:
        return True
    took_effect = decision.decided_at
    write = getattr(decision, "write", None)
    if write is not None:
        if write.state != Write.State.APPLIED or write.applied_at is None:
            return True
        took_effect = write.applied_at
    return issue.updated_at <= took_effect + CLOCK_SLACK


def _current(issue: Issue, queue: Queue) -> Proposal | None:
    return Proposal.objects.filter(issue=issue, queue=queue, status=Proposal.Status.PENDING).first()


def expected_model(queue: Queue) -> int | None:
    """The stored model a fresh proposal of this queue would use (None: none)."""
    if queue.proposer != Queue.Proposer.RULES_HISTORY:
        return None
    learned = loading.for_queue(queue)
    return learned.row_id if learned is not None else None


def is_fresh(
    proposal: Proposal | None, issue: Issue, rubric: Rubric, learned_model: int | None = None
) -> bool:
    """Made from this text, this rubric and the queue's current model: nothing to redo."""
    return (
        proposal is not None
        and proposal.input_hash == issue.content_hash
        and proposal.rubric_version == rubric.version
        and proposal.learned_model_id == learned_model
    )


def queues_to_propose(issue: Issue) -> list[Queue]:
    """The queues this issue belongs to that need a fresh proposal; withdraws from the others.

    Called after every change to an issue. Cheap: it only compares hashes, so the caller can
    enqueue proposal tasks for exactly the queues returned.
    """
    needed: list[Queue] = []
    for queue in Queue.objects.filter(repository=issue.repository):
        if not queue.matches(issue.labels, issue.state):
            Proposal.objects.filter(
                issue=issue, queue=queue, status=Proposal.Status.PENDING
            ).update(status=Proposal.Status.WITHDRAWN)
            continue
        if is_settled(issue, queue):
            continue
        rubric = loader.load(queue.rubric)
        if not is_fresh(_current(issue, queue), issue, rubric, expected_model(queue)):
            needed.append(queue)
    return needed


def spent_today(queue: Queue) -> Decimal:
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    spent = Proposal.objects.filter(queue=queue, created_at__gte=midnight).aggregate(
        total=Sum("cost_usd")
    )["total"]
    return spent or Decimal(0)


def model_unavailable(queue: Queue) -> str:
    """Why the model may not be asked for this queue now, or "" if it may."""
    if not settings.ANTHROPIC_API_KEY:
        return "no ANTHROPIC_API_KEY is configured"
    if spent_today(queue) >= queue.daily_budget_usd:
        return f"the queue's daily model budget of ${queue.daily_budget_usd} is spent"
    return ""


def wants_model(queue: Queue, rules: Draft) -> bool:
    if not queue.asks_claude:
        return False
    if queue.proposer == Queue.Proposer.HYBRID:
        return not rules.rules_fired or rules.score < queue.hybrid_threshold
    return True


def with_notice(rules: Draft, notice: str) -> Draft:
    return replace(rules, notice=f"{notice}. This is the rules' proposal.")


def combine(queue: Queue, rules: Draft, model: Draft) -> Draft:
    """The model's draft; in hybrid mode it also carries the rules' answer where they differ."""
    if queue.proposer != Queue.Proposer.HYBRID:
        return model
    hybrid = replace(
        model,
        proposer="hybrid",
        proposer_version=f"rules-{rules.proposer_version}+{model.proposer_version}",
    )
    ours = (set(rules.add), set(rules.remove), rules.template)
    theirs = (set(model.add), set(model.remove), model.template)
    return replace(hybrid, alternative=rules.summary()) if ours != theirs else hybrid


def with_history(
    queue: Queue, rubric: Rubric, issues: list[engine.IssueInput], rules: list[Draft]
) -> list[Draft]:
    """The rules' drafts with what the queue's learned model adds and disputes; the rules'
    own, saying so, while no model is trained."""
    learned = loading.for_queue(queue)
    if learned is None:
        notice = (
            f"No model is trained for this queue yet (`manage.py train_model --queue {queue.slug}`)"
        )
        return [with_notice(draft, notice) for draft in rules]
    assessments = learned_proposer.assess(learned, issues)
    return [
        learned_proposer.beside_rules(rubric, learned, assessment, draft)
        for assessment, draft in zip(assessments, rules, strict=True)
    ]


def draft_for(queue: Queue, rubric: Rubric, issue: engine.IssueInput) -> Draft:
    rules = engine.propose(rubric, issue)
    if queue.proposer == Queue.Proposer.RULES_HISTORY:
        return with_history(queue, rubric, [issue], [rules])[0]
    if not wants_model(queue, rules):
        return rules
    reason = model_unavailable(queue)
    if reason:
        return with_notice(rules, f"Claude was not asked: {reason}")
    try:
        model = claude.propose(rubric, issue)
    except claude.ModelUnavailable as exc:
        return with_notice(rules, f"Claude was not asked: {exc}")
    except claude.ModelOutputError as exc:
        fallback = with_notice(rules, f"Claude's answer was unusable twice ({exc}); fell back")
        return replace(fallback, usage=exc.usage, cost_usd=exc.cost)
    return combine(queue, rules, model)


def save(issue: Issue, queue: Queue, draft: Draft) -> Proposal | None:
    """Store the draft as the issue's pending proposal, superseding the one it replaces."""
    current = _current(issue, queue)
    try:
        with transaction.atomic():
            if current is not None:
                superseded = Proposal.objects.filter(
                    pk=current.pk, status=Proposal.Status.PENDING
                ).update(status=Proposal.Status.SUPERSEDED)
                if not superseded:
                    # Decided or replaced since we read it.
                    return None
            proposal = Proposal.from_draft(issue, queue, draft)
            proposal.save()
    except IntegrityError:
        # Another worker created the pending proposal first: theirs stands.
        return None
    return proposal


def propose(issue: Issue, queue: Queue) -> Proposal | None:
    """Make the issue's current proposal for the queue, superseding a stale pending one.

    Idempotent: with nothing changed it returns the existing proposal. Returns None when the
    issue is not in the queue, or a human decided it (also if that happened while we computed).
    """
    if not queue.matches(issue.labels, issue.state) or is_settled(issue, queue):
        return None
    rubric = loader.load(queue.rubric)
    current = _current(issue, queue)
    if current is not None and is_fresh(current, issue, rubric, expected_model(queue)):
        return current
    return save(issue, queue, draft_for(queue, rubric, issue_input(issue)))


# Issues a worker proposes in one go: two queries read what their proposals are, one writes.
PROPOSE_CHUNK = 200


def propose_many(queue: Queue, issue_ids: list[int]) -> int:
    """`propose` for many issues at once; returns how many it proposed.

    The same rules as `propose`, in a few queries per chunk instead of a few per issue: issues
    that left the queue lose their pending proposal, decided issues are skipped, fresh pending
    proposals kept, stale ones superseded. A queue that asks the model goes issue by issue, as
    each call is its own request anyway.
    """
    rubric = loader.load(queue.rubric)
    learned_model = expected_model(queue)
    made = 0
    for start in range(0, len(issue_ids), PROPOSE_CHUNK):
        chunk = issue_ids[start : start + PROPOSE_CHUNK]
        issues = list(Issue.objects.filter(pk__in=chunk))
        staying = [issue for issue in issues if queue.matches(issue.labels, issue.state)]
        leaving = {issue.pk for issue in issues} - {issue.pk for issue in staying}
        Proposal.objects.filter(
            issue_id__in=leaving, queue=queue, status=Proposal.Status.PENDING
        ).update(status=Proposal.Status.WITHDRAWN)
        if queue.asks_claude:
            made += sum(propose(issue, queue) is not None for issue in staying)
            continue
        decided = set(
            Proposal.objects.filter(
                issue_id__in=chunk, queue=queue, status=Proposal.Status.DECIDED
            ).values_list("issue_id", flat=True)
        )
        # Few issues of a chunk were decided: those are looked at one by one.
        settled = {
            issue.pk for issue in staying if issue.pk in decided and is_settled(issue, queue)
        }
        current = {
            proposal.issue_id: proposal
            for proposal in Proposal.objects.filter(
                issue_id__in=chunk, queue=queue, status=Proposal.Status.PENDING
            ).only("pk", "issue_id", "input_hash", "rubric_version", "learned_model")
        }
        due = [
            issue
            for issue in staying
            if issue.pk not in settled
            and not is_fresh(current.get(issue.pk), issue, rubric, learned_model)
        ]
        inputs = [issue_input(issue) for issue in due]
        drafts = [engine.propose(rubric, issue) for issue in inputs]
        if queue.proposer == Queue.Proposer.RULES_HISTORY:
            drafts = with_history(queue, rubric, inputs, drafts)
        fresh = [
            Proposal.from_draft(issue, queue, draft)
            for issue, draft in zip(due, drafts, strict=True)
        ]
        with transaction.atomic():
            stale = [current[p.issue_id].pk for p in fresh if p.issue_id in current]
            Proposal.objects.filter(pk__in=stale, status=Proposal.Status.PENDING).update(
                status=Proposal.Status.SUPERSEDED
            )
            # A proposal another worker made meanwhile stands: the unique pending one wins.
            created = Proposal.objects.bulk_create(fresh, ignore_conflicts=True)
        made += len(created)
    return made
