"""Backlogs through the Message Batches API: half the price, results within a day."""

from __future__ import annotations

from dataclasses import replace

import anthropic
from django.db import transaction
from django.utils import timezone

from triage import claude, proposing
from triage.models import Issue, ModelBatch, Queue
from triage.rubric import engine, loader


def submit(queue: Queue, issues: list[Issue]) -> ModelBatch | None:
    """Store the rules' proposal for each issue now, so none is missing from the inbox, and send
    the ones the model should see as one batch. Returns the batch, or None if none was sent.
    """
    rubric = loader.load(queue.rubric)
    unavailable = proposing.model_unavailable(queue)
    items: dict[str, list[object]] = {}
    inputs: list[tuple[str, engine.IssueInput]] = []
    sent: dict[str, Issue] = {}
    for issue in issues:
        if not queue.matches(issue.labels, issue.state) or proposing.is_settled(issue, queue):
            continue
        issue_input = proposing.issue_input(issue)
        rules = engine.propose(rubric, issue_input)
        if not proposing.wants_model(queue, rules):
            proposing.save(issue, queue, rules)
            continue
        if unavailable:
            proposing.save(
                issue, queue, proposing.with_notice(rules, f"Claude was not asked: {unavailable}")
            )
            continue
        proposing.save(
            issue, queue, replace(rules, notice="Claude's proposal is on its way in a batch.")
        )
        custom_id = f"issue-{issue.pk}-{issue.content_hash[:12]}"
        items[custom_id] = [issue.pk, issue.content_hash]
        inputs.append((custom_id, issue_input))
        sent[custom_id] = issue
    if not inputs:
        return None
    try:
        batch_id = claude.submit_batch(rubric, inputs)
    except claude.ModelUnavailable as exc:
        for custom_id, issue_input in inputs:
            issue = sent[custom_id]
            rules = engine.propose(rubric, issue_input)
            proposing.save(
                issue, queue, proposing.with_notice(rules, f"Claude was not asked: {exc}")
            )
        return None
    return ModelBatch.objects.create(
        queue=queue, batch_id=batch_id, rubric_version=rubric.version, items=items
    )


def ended(batch: ModelBatch) -> bool:
    try:
        return claude.batch_ended(batch.batch_id)
    except anthropic.APIError as exc:
        raise claude.ModelUnavailable(str(exc)) from exc


def collect(batch: ModelBatch) -> int:
    """Turn an ended batch's results into proposals; returns how many were stored.

    The batch is marked collected in the same transaction that stores its results, and only
    once they are all stored: a download that breaks off leaves it to the next sweep. The row
    lock keeps two sweeps from collecting it at once.
    """
    with transaction.atomic():
        locked = (
            ModelBatch.objects.select_for_update(skip_locked=True)
            .filter(pk=batch.pk, state=ModelBatch.State.SUBMITTED)
            .first()
        )
        if locked is None:
            return 0
        stored = _store_results(locked)
        ModelBatch.objects.filter(pk=batch.pk).update(
            state=ModelBatch.State.COLLECTED, collected_at=timezone.now()
        )
    return stored


def _store_results(batch: ModelBatch) -> int:
    queue = batch.queue
    rubric = loader.load(queue.rubric)
    stored = 0
    for custom_id, message, error in claude.batch_results(batch.batch_id):
        issue_id, input_hash = batch.items.get(custom_id, (None, None))
        issue = Issue.objects.filter(pk=issue_id).first()
        # An issue edited since, or decided, already has what it needs.
        if (
            issue is None
            or issue.content_hash != input_hash
            or rubric.version != batch.rubric_version
        ):
            continue
        if proposing.is_settled(issue, queue):
            continue
        issue_input = proposing.issue_input(issue)
        rules = engine.propose(rubric, issue_input)
        if message is None:
            draft = proposing.with_notice(rules, f"The batch request failed ({error})")
        else:
            try:
                draft = proposing.combine(
                    queue, rules, claude.draft_from_batch(rubric, issue_input, message)
                )
            except ValueError as exc:
                draft = proposing.with_notice(
                    rules, f"Claude's answer was unusable ({exc}); fell back"
                )
        stored += proposing.save(issue, queue, draft) is not None
    return stored
