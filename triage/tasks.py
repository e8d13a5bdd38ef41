"""Celery tasks. Each takes ids, re-reads its rows and is safe to run twice."""

from __future__ import annotations

import functools
import logging
import threading
from datetime import UTC, date, datetime

from celery import current_app, shared_task
from celery.contrib.django.task import DjangoTask
from django import db
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import KombuError

from triage import agenda, batching, claude, github, ingest, outbox, proposing, reports, sync
from triage.github import PermanentGitHubError, RetryableGitHubError
from triage.history import sync as history_sync
from triage.learning import store
from triage.learning.training import TrainingError
from triage.models import Decision, Issue, ModelBatch, Proposal, Queue
from triage.rubric import loader
from triage.signin import membership
from triage.similar import finding

log = logging.getLogger(__name__)


@shared_task(base=DjangoTask)
def sync_all_queues() -> None:
    for queue_id in Queue.objects.values_list("pk", flat=True):
        sync_queue.delay(queue_id)
    repropose_stale.delay()


@shared_task(base=DjangoTask, bind=True, max_retries=10)
def sync_queue(self: DjangoTask[[int], None], queue_id: int) -> None:
    queue = Queue.objects.filter(pk=queue_id).first()
    if queue is None or not queue.claim_sync():
        return
    queue.refresh_from_db()
    changed: list[int] = []
    try:
        sync.sync_queue(queue, on_changed=functools.partial(_changed, changed))
    except RetryableGitHubError as exc:
        Queue.objects.filter(pk=queue_id).update(
            sync_state=Queue.SyncState.IDLE,
            sync_error=f"{exc} (retrying in {exc.retry_after:.0f} s)",
        )
        raise self.retry(countdown=exc.retry_after, exc=exc) from exc
    except (PermanentGitHubError, ValueError) as exc:
        Queue.objects.filter(pk=queue_id).update(
            sync_state=Queue.SyncState.FAILED, sync_error=str(exc), sync_finished_at=timezone.now()
        )
    except Exception as exc:
        # Anything else (the database went away, a bug): the queue says so at once rather than
        # showing "running" until its lease runs out. The worker logs the traceback.
        Queue.objects.filter(pk=queue_id).update(
            sync_state=Queue.SyncState.FAILED,
            sync_error=f"The sync stopped: {type(exc).__name__}: {exc}"[:1000],
            sync_finished_at=timezone.now(),
        )
        raise
    finally:
        find_similar_later(changed)


def _changed(changed: list[int], issue: Issue) -> None:
    """A sync's `on_changed`: propose afresh now, and find similar issues once it is done."""
    propose_changed(issue)
    changed.append(issue.pk)


@shared_task(base=DjangoTask)
def sync_all_histories() -> None:
    """Beat: every queue's labelled history stays fresh (an incremental read each time)."""
    for queue_id in Queue.objects.values_list("pk", flat=True):
        sync_history.delay(queue_id)


@shared_task(base=DjangoTask, bind=True, max_retries=10)
def sync_history(
    self: DjangoTask[[int, str | None], None], queue_id: int, since: str | None = None
) -> None:
    """Read the queue's closed and triaged issues since its history cursor (or `since`, an ISO
    date or time), as labelled examples."""
    queue = Queue.objects.filter(pk=queue_id).first()
    if queue is None or not queue.claim_history():
        return
    queue.refresh_from_db()
    changed: list[int] = []
    start = datetime.fromisoformat(since) if since else None
    if start is not None and start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    try:
        history_sync.sync_history(
            queue, on_changed=functools.partial(_changed, changed), since=start
        )
    except RetryableGitHubError as exc:
        Queue.objects.filter(pk=queue_id).update(
            history_state=Queue.SyncState.IDLE,
            history_error=f"{exc} (retrying in {exc.retry_after:.0f} s)",
        )
        raise self.retry(countdown=exc.retry_after, exc=exc) from exc
    except (PermanentGitHubError, ValueError) as exc:
        Queue.objects.filter(pk=queue_id).update(
            history_state=Queue.SyncState.FAILED,
            history_error=str(exc),
            history_finished_at=timezone.now(),
        )
    except Exception as exc:
        Queue.objects.filter(pk=queue_id).update(
            history_state=Queue.SyncState.FAILED,
            history_error=f"The history sync stopped: {type(exc).__name__}: {exc}"[:1000],
            history_finished_at=timezone.now(),
        )
        raise
    finally:
        find_similar_later(changed)


# Issues per similar-issue task; from this many at once the index is rebuilt instead, since
# a rebuild then costs less than moving rows in and out of the old one.
SIMILAR_CHUNK = 200
SIMILAR_REBUILD_FROM = 2000


def find_similar_later(issue_ids: list[int]) -> None:
    """Once committed, find the similar issues of these issues (workers, never a request)."""
    if len(issue_ids) >= SIMILAR_REBUILD_FROM:
        repositories = (
            Issue.objects.filter(pk__in=issue_ids).values_list("repository", flat=True).distinct()
        )
        for repository in repositories:
            rebuild_similar_index.delay_on_commit(repository)
        return
    for start in range(0, len(issue_ids), SIMILAR_CHUNK):
        find_similar.delay_on_commit(issue_ids[start : start + SIMILAR_CHUNK])


@shared_task(base=DjangoTask)
def find_similar(issue_ids: list[int]) -> None:
    """Find and store the most similar issues of each of these issues (idempotent: the rows of
    an issue are replaced)."""
    finding.find(issue_ids)


@shared_task(base=DjangoTask)
def rebuild_similar_index(repository: str) -> None:
    """Build the repository's index afresh, then find again the similar issues of the issues
    oncalls are looking at (those with a pending proposal): new history may be nearer."""
    finding.rebuild(repository)
    pending = list(
        Proposal.objects.filter(status=Proposal.Status.PENDING, issue__repository=repository)
        .values_list("issue_id", flat=True)
        .distinct()
    )
    for start in range(0, len(pending), SIMILAR_CHUNK):
        find_similar.delay(pending[start : start + SIMILAR_CHUNK])


@shared_task(base=DjangoTask)
def rebuild_similar_indexes() -> None:
    """Beat: each repository's index takes in the words of the issues it has seen since."""
    for repository in Queue.objects.values_list("repository", flat=True).distinct():
        rebuild_similar_index.delay(repository)


@shared_task(base=DjangoTask, bind=True, max_retries=10)
def refresh_issue(self: DjangoTask[[str, int], None], repository: str, number: int) -> None:
    """Re-read one issue GitHub says changed, store it, and propose again if it changed."""
    try:
        raw, comments = github.read_issue(repository, number)
    except RetryableGitHubError as exc:
        raise self.retry(countdown=exc.retry_after, exc=exc) from exc
    except PermanentGitHubError as exc:
        log.warning("refresh of %s#%s: %s", repository, number, exc)
        return
    fields = ingest.parse(raw, comments)
    with transaction.atomic():
        issue, changed = ingest.upsert(repository, fields)
        if changed:
            propose_changed(issue)
            find_similar_later([issue.pk])


@shared_task(base=DjangoTask)
def add_escalation_to_agenda(decision_id: int) -> None:
    """An escalation goes on the upcoming meeting's agenda, its note with it, at once."""
    decision = Decision.objects.filter(pk=decision_id).first()
    if decision is not None:
        agenda.add_escalation(decision)


@shared_task(base=DjangoTask)
def propose_issues(queue_id: int, issue_ids: list[int]) -> None:
    queue = Queue.objects.filter(pk=queue_id).first()
    if queue is not None:
        proposing.propose_many(queue, issue_ids)


@shared_task(base=DjangoTask)
def repropose_stale() -> None:
    """Pending proposals made from an older rubric or model get a fresh one; decided ones
    never do."""
    for queue in Queue.objects.all():
        version = loader.load(queue.rubric).version
        stale = Proposal.objects.filter(queue=queue, status=Proposal.Status.PENDING).exclude(
            rubric_version=version, learned_model=proposing.expected_model(queue)
        )
        issue_ids = list(stale.values_list("issue_id", flat=True))
        if issue_ids:
            propose_later(queue, issue_ids)


@shared_task(base=DjangoTask)
def train_models() -> None:
    """Beat: every queue that proposes with a learned model learns from the latest history."""
    for queue_id in Queue.objects.filter(proposer=Queue.Proposer.RULES_HISTORY).values_list(
        "pk", flat=True
    ):
        train_model.delay(queue_id)


@shared_task(base=DjangoTask)
def train_model(queue_id: int) -> None:
    """A new model version for the queue, unless its examples are those of the latest one;
    pending proposals then follow the new version."""
    queue = Queue.objects.filter(pk=queue_id).first()
    if queue is None:
        return
    try:
        row, new = store.train(queue)
    except TrainingError as exc:
        # Too little history yet: permanent until more issues close, so not retried.
        log.info("queue %s: no model trained: %s", queue.slug, exc)
        return
    if new:
        log.info("queue %s: model v%s trained on %s issues", queue.slug, row.version, row.examples)
        repropose_stale.delay()


@shared_task(base=DjangoTask)
def propose_backlog(queue_id: int, issue_ids: list[int]) -> None:
    """Rules now for every issue; the ones the model should see go out as one Message Batch."""
    queue = Queue.objects.filter(pk=queue_id).first()
    if queue is not None:
        batching.submit(queue, list(Issue.objects.filter(pk__in=issue_ids)))


@shared_task(base=DjangoTask)
def collect_batches() -> None:
    """Beat polls the open batches; one that has ended becomes proposals (at most once)."""
    for batch in ModelBatch.objects.filter(state=ModelBatch.State.SUBMITTED):
        try:
            ended = batching.ended(batch)
        except claude.ModelUnavailable as exc:
            log.warning("batch %s: %s", batch.batch_id, exc)
            continue
        if ended:
            batching.collect(batch)


@shared_task(base=DjangoTask)
def apply_write(write_id: int) -> None:
    write = outbox.claim(write_id)
    if write is None:
        return
    try:
        refreshed = outbox.apply(write)
    except RetryableGitHubError as exc:
        if write.attempts >= settings.TRIAGE_WRITE_MAX_ATTEMPTS:
            outbox.give_up(write, f"Gave up after {write.attempts} attempts: {exc}")
            return
        if outbox.postpone(write, str(exc), exc.retry_after):
            # The row is due again then; this message is one way of getting there, beat the other.
            log.info("write %s: %s; retry in %.0f s", write.pk, exc, exc.retry_after)
            send_write(write.pk, countdown=exc.retry_after)
    except PermanentGitHubError as exc:
        outbox.give_up(write, str(exc))
    else:
        if refreshed is not None:
            # The console now knows the issue as GitHub has it: propose where that is needed.
            propose_changed(refreshed)


@shared_task(base=DjangoTask)
def resend_stale_writes() -> None:
    """Beat: the table is the queue. A write whose message was lost is sent again."""
    for write_id in outbox.due_for_resend():
        send_write(write_id)


def send_write(write_id: int, countdown: float = 0.0) -> None:
    """Send a write's task, to run `countdown` seconds from now. A broker outage leaves the row
    queued: beat sends it later."""
    try:
        if countdown <= 0:
            apply_write.delay(write_id)
        elif current_app.conf.task_always_eager:
            # In-process tasks ignore a countdown: wait it out on a timer thread.
            timer = threading.Timer(countdown, _send_in_thread, args=(write_id,))
            timer.daemon = True
            _timers.add(timer)
            timer.start()
        else:
            apply_write.apply_async((write_id,), countdown=countdown)
    except KombuError as exc:
        log.warning("write %s not sent (%s); resend_stale_writes will send it", write_id, exc)


def _send_in_thread(write_id: int) -> None:
    _timers.discard(threading.current_thread())
    try:
        send_write(write_id)
    finally:
        db.connections.close_all()


# Writes waiting in this process (in-process tasks only): a worker's broker holds them otherwise.
_timers: set[threading.Timer] = set()


def cancel_pending_sends() -> None:
    """Forget writes waiting on timers in this process; the table still holds them for beat."""
    for timer in list(_timers):
        timer.cancel()
    _timers.clear()


def send_write_on_commit(write_id: int) -> None:
    """Send once the approval that made the write is committed, when its undo window has
    passed; never fails the request."""
    countdown = float(settings.TRIAGE_UNDO_SECONDS)
    transaction.on_commit(functools.partial(send_write, write_id, countdown))


def propose_later(queue: Queue, issue_ids: list[int]) -> None:
    """Propose for these issues once committed: a model queue's backlog as one Message Batch."""
    # Batches are collected by beat: with tasks run in-process there is none to wait for them.
    if (
        queue.asks_claude
        and settings.ANTHROPIC_API_KEY
        and len(issue_ids) >= settings.TRIAGE_BATCH_THRESHOLD
        and not current_app.conf.task_always_eager
    ):
        propose_backlog.delay_on_commit(queue.pk, issue_ids)
        return
    for start in range(0, len(issue_ids), proposing.PROPOSE_CHUNK):
        propose_issues.delay_on_commit(queue.pk, issue_ids[start : start + proposing.PROPOSE_CHUNK])


def propose_changed(issue: Issue) -> None:
    """After any change to an issue: a fresh proposal in each queue that needs one."""
    for queue in proposing.queues_to_propose(issue):
        propose_later(queue, [issue.pk])


@shared_task(base=DjangoTask)
def recount_report(queue_id: int, start: str, end: str) -> None:
    """Count a report again, so that its page shows the decisions that came since."""
    queue = Queue.objects.filter(pk=queue_id).first()
    if queue is not None:
        reports.recount(queue, reports.Period(date.fromisoformat(start), date.fromisoformat(end)))


@shared_task(base=DjangoTask)
def keep_reports_counted() -> None:
    """Beat: the report ranges offered in one click stay counted, so their pages never wait."""
    today = timezone.localdate()
    for queue in Queue.objects.all():
        for days in reports.PRESET_DAYS:
            reports.keep_counted(queue, reports.Period.ending(today, days))


@shared_task(base=DjangoTask, bind=True, max_retries=5)
def recheck_memberships(self: DjangoTask[[], None]) -> None:
    """Beat (daily): who is still in the organisation and in each queue's GitHub team.

    GitHub down or rate-limited: try again later, keeping what was stored. Running it twice
    asks twice and stores the same answer."""
    try:
        checked, gone = membership.recheck_all()
    except membership.MembershipUnknown as exc:
        log.warning("membership re-check postponed: %s", exc)
        raise self.retry(countdown=900) from exc
    log.info("membership re-checked for %d users; %d left the organisation", checked, gone)
