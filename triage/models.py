from __future__ import annotations

import hashlib
import hmac
import json
import math
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import connection, models, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from triage import judging
from triage.rubric import loader
from triage.rubric.engine import IssueInput

if TYPE_CHECKING:
    from triage.rubric.engine import Draft

# A GitHub team as org/team-slug, the way GitHub names it in @mentions.
GITHUB_TEAM = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9][A-Za-z0-9_.-]*$",
    "Give the team as organisation/team-slug, e.g. pytorch/pt2-oncall.",
)

# A Celery worker that died mid-task leaves its claim behind; after this long another may take over.
CLAIM_LEASE = timedelta(minutes=5)
ESCALATION_LABEL = "triage review"


class Queue(models.Model):
    """One oncall queue: which open issues of a repository belong to it and which rubric applies."""

    class SyncState(models.TextChoices):
        IDLE = "idle"
        RUNNING = "running"
        FAILED = "failed"

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=100)
    repository = models.CharField(max_length=200, help_text="owner/name on GitHub")
    require_labels = models.JSONField(
        default=list, blank=True, help_text="Every one of these labels must be on the issue."
    )
    exclude_labels = models.JSONField(
        default=list,
        blank=True,
        help_text='None of these may be on the issue; "prefix*" excludes every label so prefixed.',
    )
    rubric = models.CharField(max_length=50, help_text="Directory name under triage/rubrics/")
    position = models.PositiveSmallIntegerField(default=0)

    class Proposer(models.TextChoices):
        RULES = "rules"
        RULES_HISTORY = "rules+history", "Rules, and a model learned from past triage"
        LLM = "llm", "Claude"
        HYBRID = "hybrid", "Rules, then Claude where they are unsure"

    # rules+history proposes with the rules alone, and says so, until a model is trained.
    proposer = models.CharField(max_length=20, choices=Proposer, default=Proposer.RULES_HISTORY)
    hybrid_threshold = models.FloatField(
        default=0.7, help_text="In hybrid mode, rule proposals scoring below this also ask Claude."
    )
    stale_after_hours = models.PositiveIntegerField(
        default=72, help_text="Pending issues older than this are marked stale in the inbox."
    )
    daily_budget_usd = models.DecimalField(
        max_digits=8,
        decimal_places=2,
        default=Decimal("5.00"),
        help_text="Model calls stop for the day once this queue's spend reaches it.",
    )

    # Who may decide here (anyone else of the organisation reads): the members of a GitHub team,
    # as last checked (at sign-in and daily), and the members of a group set in the admin.
    github_team = models.CharField(
        max_length=140,
        blank=True,
        validators=[GITHUB_TEAM],
        help_text="organisation/team-slug whose members decide in this queue.",
    )
    deciders = models.ForeignKey(
        "auth.Group",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Members of this group decide in this queue too.",
    )

    # Incremental sync state. The cursor is GitHub's own updated_at, never our clock.
    sync_cursor = models.DateTimeField(null=True, blank=True)
    sync_state = models.CharField(max_length=10, choices=SyncState, default=SyncState.IDLE)
    sync_started_at = models.DateTimeField(null=True, blank=True)
    sync_finished_at = models.DateTimeField(null=True, blank=True)
    sync_seen = models.PositiveIntegerField(default=0)
    sync_error = models.TextField(blank=True)
    # The ETag of the last listing: a poll that finds nothing new is answered 304, for free.
    sync_etag = models.CharField(max_length=200, blank=True)
    # GitHub's core rate limit as the last sync left it.
    rate_remaining = models.PositiveIntegerField(null=True, blank=True)
    rate_limit = models.PositiveIntegerField(null=True, blank=True)
    rate_reset_at = models.DateTimeField(null=True, blank=True)

    # The history sync (triage.history): closed and triaged issues, read for their final labels.
    # Its own cursor and state, so that it never holds up nor resets the open-issue sync.
    history_cursor = models.DateTimeField(null=True, blank=True)
    history_state = models.CharField(max_length=10, choices=SyncState, default=SyncState.IDLE)
    history_started_at = models.DateTimeField(null=True, blank=True)
    history_finished_at = models.DateTimeField(null=True, blank=True)
    history_seen = models.PositiveIntegerField(default=0)
    history_error = models.TextField(blank=True)

    class Meta:
        ordering = ["position", "slug"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        # GitHub matches team names whatever their case; memberships are stored lower-cased.
        self.github_team = self.github_team.strip().lower()
        super().save(*args, **kwargs)

    @property
    def asks_claude(self) -> bool:
        """Whether its proposals may call the model (and cost money)."""
        return self.proposer in (Queue.Proposer.LLM, Queue.Proposer.HYBRID)

    def matches(self, labels: list[str], state: str) -> bool:
        if state != "open":
            return False
        present = set(labels)
        if not set(self.require_labels) <= present:
            return False
        for excluded in self.exclude_labels:
            if excluded.endswith("*"):
                if any(label.startswith(excluded[:-1]) for label in present):
                    return False
            elif excluded in present:
                return False
        return True

    def claim_sync(self) -> bool:
        """Mark this queue as syncing unless a live sync already holds it."""
        now = timezone.now()
        claimed = (
            Queue.objects.filter(pk=self.pk)
            .filter(
                ~Q(sync_state=Queue.SyncState.RUNNING) | Q(sync_started_at__lt=now - CLAIM_LEASE)
            )
            .update(
                sync_state=Queue.SyncState.RUNNING, sync_started_at=now, sync_seen=0, sync_error=""
            )
        )
        return claimed == 1

    def claim_history(self) -> bool:
        """Mark this queue's history as syncing unless a live history sync already holds it."""
        now = timezone.now()
        claimed = (
            Queue.objects.filter(pk=self.pk)
            .filter(
                ~Q(history_state=Queue.SyncState.RUNNING)
                | Q(history_started_at__lt=now - CLAIM_LEASE)
            )
            .update(
                history_state=Queue.SyncState.RUNNING,
                history_started_at=now,
                history_seen=0,
                history_error="",
            )
        )
        return claimed == 1


def comment_marker(kind: str, pk: int) -> str:
    """Hidden in a posted comment so that a retried write finds its own earlier post.

    Keyed with SECRET_KEY: ids are sequential, and a marker anyone could write ahead of time
    in a comment of their own would make the console believe it had already posted.
    """
    digest = hmac.new(
        settings.SECRET_KEY.encode(), f"{kind}:{pk}".encode(), hashlib.sha256
    ).hexdigest()
    return f"<!-- triage-console:{digest[:32]} -->"


def safe_github_url(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    if parts.scheme != "https" or parts.hostname != settings.GITHUB_WEB_HOST or parts.port:
        return ""
    return url


class Issue(models.Model):
    repository = models.CharField(max_length=200)
    number = models.PositiveIntegerField()
    title = models.CharField(max_length=1000)
    body = models.TextField(blank=True)
    state = models.CharField(max_length=10, default="open")
    author = models.CharField(max_length=100, blank=True)
    html_url = models.URLField(max_length=500, blank=True)
    labels = models.JSONField(default=list)
    # [{"id": int, "author": str, "body": str, "created_at": iso}]
    comments = models.JSONField(default=list)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    synced_at = models.DateTimeField(auto_now=True)
    # When the history sync or a labelled import last stored this issue as a labelled example
    # (closed, or open with the label that marks it triaged): its labels are final. Null for
    # the open issues the queues sync; a reopened issue loses it.
    labelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["repository", "number"], name="issue_unique_number")
        ]
        indexes = [
            models.Index(
                fields=["repository", "number"],
                condition=Q(labelled_at__isnull=False),
                name="issue_labelled",
            )
        ]

    def __str__(self) -> str:
        return f"{self.repository}#{self.number}"

    @property
    def link(self) -> str:
        """The issue's page on GitHub, or "" when its URL is anything but https:// on GitHub's
        host: a `javascript:` URL must never become a link in the console's origin."""
        return safe_github_url(self.html_url)

    def as_input(self) -> IssueInput:
        """The issue as a proposer reads it."""
        return IssueInput(
            number=self.number,
            title=self.title,
            body=self.body,
            labels=tuple(self.labels),
            comments=tuple(
                (int(c.get("id") or 0), str(c.get("body") or "")) for c in self.comments
            ),
        )

    @property
    def content_hash(self) -> str:
        """What a proposal saw: text, comments and labels. A change to any of them re-proposes."""
        return self.content_hash_with(self.labels)

    def content_hash_with(self, labels: list[str]) -> str:
        """The content hash the issue would have with these labels."""
        payload = {
            "title": self.title,
            "body": self.body,
            "state": self.state,
            "labels": sorted(labels),
            "comments": [[c.get("id"), c.get("body", "")] for c in self.comments],
        }
        encoded = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()
        return hashlib.sha256(encoded).hexdigest()


class Proposal(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        DECIDED = "decided"
        SUPERSEDED = "superseded"
        WITHDRAWN = "withdrawn"

    class Tier(models.TextChoices):
        HIGH = "high"
        MEDIUM = "medium"
        LOW = "low"

    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="proposals")
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="proposals")
    status = models.CharField(max_length=12, choices=Status, default=Status.PENDING)
    proposer = models.CharField(max_length=50)
    proposer_version = models.CharField(max_length=50)
    rubric_version = models.CharField(max_length=64)
    input_hash = models.CharField(max_length=64)
    labels_seen = models.JSONField(default=list)

    add_labels = models.JSONField(default=list)
    remove_labels = models.JSONField(default=list)
    comment_template = models.CharField(max_length=100, blank=True)
    comment_body = models.TextField(blank=True)
    close = models.BooleanField(default=False)
    score = models.FloatField()
    tier = models.CharField(max_length=6, choices=Tier)
    rationale = models.TextField()
    # [{"section", "section_title", "rule", "evidence", "source", "start", "end"}]
    citations = models.JSONField(default=list)
    # What the policy guard removed: [{"label", "action", "reason"}]
    dropped = models.JSONField(default=list)
    # Model proposals: tokens, latency and cost; a notice when the queue's proposer was not used.
    usage = models.JSONField(default=dict, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    cost_usd = models.DecimalField(max_digits=10, decimal_places=6, null=True, blank=True)
    notice = models.TextField(blank=True)
    # Hybrid mode: the other proposer's answer where the two disagree.
    alternative = models.JSONField(default=dict, blank=True)
    # rules+history: the model's evidence and disagreements, and the model version it used.
    learned = models.JSONField(default=dict, blank=True)
    learned_model = models.ForeignKey(
        "LearnedModel", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # The issue's, copied: the inbox sorts on it, and an index cannot span a join.
    issue_created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["issue", "queue"],
                condition=Q(status="pending"),
                name="proposal_one_pending_per_issue_queue",
            )
        ]
        # The inbox's two orders (triage.inbox.ORDERS), over pending proposals only.
        indexes = [
            models.Index(
                fields=["queue", "-issue_created_at", "-id"],
                condition=Q(status="pending"),
                name="proposal_pending_newest",
            ),
            models.Index(
                fields=["queue", "score", "-issue_created_at", "-id"],
                condition=Q(status="pending"),
                name="proposal_pending_confidence",
            ),
        ]

    def __str__(self) -> str:
        return f"Proposal {self.pk} for {self.issue}"

    @classmethod
    def from_draft(cls, issue: Issue, queue: Queue, draft: Draft) -> Proposal:
        return cls(
            issue=issue,
            queue=queue,
            issue_created_at=issue.created_at,
            proposer=draft.proposer,
            proposer_version=draft.proposer_version,
            rubric_version=draft.rubric_version,
            input_hash=issue.content_hash,
            labels_seen=list(issue.labels),
            add_labels=list(draft.add),
            remove_labels=list(draft.remove),
            comment_template=draft.template,
            comment_body=draft.comment,
            close=draft.close,
            score=draft.score,
            tier=draft.tier,
            rationale=draft.rationale,
            citations=[c.as_dict() for c in draft.citations],
            dropped=[d.as_dict() for d in draft.dropped],
            usage=dict(draft.usage),
            latency_ms=draft.latency_ms,
            cost_usd=draft.cost_usd,
            notice=draft.notice,
            alternative=dict(draft.alternative),
            learned=dict(draft.learned),
            learned_model_id=draft.learned_model,
        )

    @property
    def is_pending(self) -> bool:
        return self.status == Proposal.Status.PENDING

    def hybrid_difference(self) -> dict[str, list[str]]:
        """Label changes only one of the two proposers made ("-label" for a removal)."""
        rules = {
            *self.alternative.get("add", []),
            *(f"-{r}" for r in self.alternative.get("remove", [])),
        }
        model = {*self.add_labels, *(f"-{r}" for r in self.remove_labels)}
        return {"only_model": sorted(model - rules), "only_rules": sorted(rules - model)}

    def _texts(self) -> dict[str, str]:
        issue = self.issue
        return {"title": issue.title, "body": issue.body} | {
            f"comment:{comment.get('id')}": str(comment.get("body") or "")
            for comment in issue.comments
        }

    @staticmethod
    def _with_context(quote: dict[str, Any], texts: dict[str, str]) -> dict[str, Any]:
        """The quote with the text around its span, so the span can be marked; no context
        when the text changed since and the span no longer holds the quote."""
        text = texts.get(quote["source"], "")
        start, end = quote["start"], quote["end"]
        if quote["evidence"] and text[start:end] == quote["evidence"]:
            return quote | {
                "before": text[max(0, start - 60) : start],
                "after": text[end : end + 60],
            }
        return quote | {"before": "", "after": ""}

    def cited_evidence(self) -> list[dict[str, Any]]:
        """The citations, each with the text around its evidence so the span can be marked."""
        texts = self._texts()
        return [self._with_context(citation, texts) for citation in self.citations]

    def learned_evidence(self) -> list[dict[str, Any]]:
        """What the learned model said per label: its probability and tier, whether it or the
        rules proposed the label, the terms that weighed most (marked in their context), and
        the similar past issues that carry the label."""
        if not self.learned:
            return []
        texts = self._texts()
        rubric = loader.load(self.queue.rubric)
        added = set(self.learned.get("added", []))
        shown = []
        for entry in self.learned.get("labels", []):
            shown.append(
                entry
                | {
                    "tier": rubric.tier(entry["probability"]),
                    "by_history": entry["label"] in added or self.proposer != "rules+history",
                    "terms": [self._with_context(term, texts) for term in entry["terms"]],
                    "neighbour_links": [
                        (
                            number,
                            safe_github_url(
                                f"https://{settings.GITHUB_WEB_HOST}/{self.issue.repository}/issues/{number}"
                            ),
                        )
                        for number in entry["carrying"]
                    ],
                }
            )
        return shown

    def changed_since(self) -> dict[str, list[str]] | None:
        """What changed on the issue since this proposal was made (None: nothing did): labels
        added and removed; `text` says the title, body, state or comments changed."""
        issue = self.issue
        if self.input_hash == issue.content_hash:
            return None
        seen, now = set(self.labels_seen), set(issue.labels)
        text_changed = self.input_hash != issue.content_hash_with(self.labels_seen)
        return {
            "added": sorted(now - seen),
            "removed": sorted(seen - now),
            "text": ["text"] if text_changed else [],
        }

    @property
    def is_empty(self) -> bool:
        return not (self.add_labels or self.remove_labels or self.comment_body or self.close)

    def decide(
        self,
        *,
        kind: str,
        user: Any,
        add_labels: list[str],
        remove_labels: list[str],
        comment_body: str,
        close: bool,
        note: str,
    ) -> Decision | None:
        """Record a human decision. Returns None when the proposal was no longer pending (a
        double submit, or a newer proposal replaced it).

        Its GitHub write is the outbox's (`triage.outbox.for_decision`), made in the caller's
        transaction.
        """
        if kind == Decision.Kind.ESCALATE and ESCALATION_LABEL not in add_labels:
            add_labels = [*add_labels, ESCALATION_LABEL]
        with transaction.atomic():
            claimed = Proposal.objects.filter(pk=self.pk, status=Proposal.Status.PENDING).update(
                status=Proposal.Status.DECIDED
            )
            if not claimed:
                return None
            self.status = Proposal.Status.DECIDED
            decision = Decision.objects.create(
                proposal=self,
                kind=kind,
                decided_by=user,
                add_labels=add_labels,
                remove_labels=remove_labels,
                comment_body=comment_body,
                close=close,
                note=note,
            )
            Verdict.record(decision)
        return decision


class LearnedModel(models.Model):
    """One version of a queue's classifier, trained on issues whose labels are final.

    Like a rubric version, a proposal records the one it used. The fitted model is stored
    pickled (`triage.learning.store`): it is only ever read back by the code that wrote it, and
    a model written by another scikit-learn version is not read but retrained.
    """

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="learned_models")
    version = models.PositiveIntegerField()
    trained_at = models.DateTimeField(default=timezone.now)
    examples = models.PositiveIntegerField()
    # Where the examples came from ("database", or a file's name) and a hash of them with the
    # rubric's vocabulary: training again on the same examples makes no new version.
    source = models.CharField(max_length=200)
    fingerprint = models.CharField(max_length=64)
    rubric_version = models.CharField(max_length=64)
    labels = models.JSONField(default=list)
    # Out-of-fold precision and recall per label and overall, features, seconds taken.
    metrics = models.JSONField(default=dict)
    library_version = models.CharField(max_length=30)
    fitted = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "version"], name="learned_model_version")
        ]
        ordering = ["queue", "-version"]

    def __str__(self) -> str:
        return f"{self.queue.slug} model v{self.version}"


class ModelBatch(models.Model):
    """A Message Batch sent for a backlog of one queue, until its results are collected."""

    class State(models.TextChoices):
        SUBMITTED = "submitted"
        COLLECTED = "collected"
        FAILED = "failed"

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="batches")
    batch_id = models.CharField(max_length=100, unique=True)
    rubric_version = models.CharField(max_length=64)
    # custom_id -> [issue id, the issue content hash the request was built from]
    items = models.JSONField(default=dict)
    state = models.CharField(max_length=10, choices=State, default=State.SUBMITTED)
    created_at = models.DateTimeField(default=timezone.now)
    collected_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"{self.batch_id} ({self.state})"


class Decision(models.Model):
    class Kind(models.TextChoices):
        ACCEPT = "accept"
        EDIT = "edit"
        ESCALATE = "escalate"
        REJECT = "reject"

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="decisions")
    kind = models.CharField(max_length=10, choices=Kind)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    decided_at = models.DateTimeField(default=timezone.now)
    add_labels = models.JSONField(default=list)
    remove_labels = models.JSONField(default=list)
    comment_body = models.TextField(blank=True)
    close = models.BooleanField(default=False)
    # The escalation note, the reason for a rejection, or an editor's remark.
    note = models.TextField(blank=True)

    class Meta:
        permissions = [("decide", "Can decide proposals (oncall)")]
        indexes = [models.Index(fields=["decided_at"])]

    def __str__(self) -> str:
        return f"{self.kind} of proposal {self.proposal_id}"

    @property
    def verb(self) -> str:
        return {
            "accept": "accepted",
            "edit": "edited",
            "escalate": "escalated",
            "reject": "rejected",
        }[self.kind]

    @property
    def comment_marker(self) -> str:
        return comment_marker("decision", self.pk)

    def followup(self) -> Proposal | None:
        """Where the issue went after this decision's write conflicted: its pending proposal in
        the same queue, or None when it left the queue."""
        return (
            Proposal.objects.filter(
                issue_id=self.proposal.issue_id,
                queue_id=self.proposal.queue_id,
                status=Proposal.Status.PENDING,
            )
            .order_by("-pk")
            .first()
        )

    def summary(self) -> str:
        """Who decided what, in one line: shown to an oncall who came second."""
        changes = [f"+{label}" for label in self.add_labels] + [
            f"-{label}" for label in self.remove_labels
        ]
        when = timezone.localtime(self.decided_at).strftime("%Y-%m-%d %H:%M")
        what = f" ({', '.join(changes)})" if changes else ""
        return f"{self.decided_by} {self.verb} it at {when}{what}."

    def diff(self) -> dict[str, list[str]]:
        """How the approved change differs from what was proposed."""
        proposal = self.proposal
        return {
            "added_by_human": sorted(set(self.add_labels) - set(proposal.add_labels)),
            "dropped_by_human": sorted(set(proposal.add_labels) - set(self.add_labels)),
            "removal_added": sorted(set(self.remove_labels) - set(proposal.remove_labels)),
            "removal_dropped": sorted(set(proposal.remove_labels) - set(self.remove_labels)),
        }

    @property
    def comment_changed(self) -> bool:
        return self.comment_body.strip() != self.proposal.comment_body.strip()


@dataclass(frozen=True)
class Change:
    """What a write must do to one issue, whoever approved it."""

    issue: Issue
    add: list[str]
    remove: list[str]
    comment: str
    close: bool
    # The labels the approver saw: a human change since then to a touched label is a conflict.
    baseline: list[str]
    # Hidden in the posted comment so that a retried write finds its own earlier post.
    marker: str


class Write(models.Model):
    """The outbox row of an approval (an oncall's decision or a meeting's outcome): what must
    reach GitHub, and what did."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        APPLIED = "applied"
        FAILED = "failed"
        CONFLICT = "conflict"
        # Undone within the grace period: nothing was sent, the approval is withdrawn.
        WITHDRAWN = "withdrawn"

    decision = models.OneToOneField(
        Decision, on_delete=models.CASCADE, related_name="write", null=True, blank=True
    )
    outcome = models.OneToOneField(
        "AgendaItem", on_delete=models.CASCADE, related_name="write", null=True, blank=True
    )
    state = models.CharField(max_length=10, choices=State, default=State.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    claimed_at = models.DateTimeField(null=True, blank=True)
    # Who holds the claim: a worker may settle the write only while the token is still its own.
    claim_token = models.UUIDField(null=True, blank=True)
    # A queued write is due from then on; beat re-sends one whose message seems lost.
    due_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True)
    # {"added": [...], "removed": [...], "comment_id": int | None, "closed": bool}
    sent = models.JSONField(default=dict)
    applied_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(decision__isnull=False, outcome__isnull=True)
                | Q(decision__isnull=True, outcome__isnull=False),
                name="write_approved_by_exactly_one",
            )
        ]

    def __str__(self) -> str:
        return f"Write {self.pk} ({self.state})"

    def change(self) -> Change:
        if self.decision is not None:
            decision = self.decision
            return Change(
                issue=decision.proposal.issue,
                add=list(decision.add_labels),
                remove=list(decision.remove_labels),
                comment=decision.comment_body,
                close=decision.close,
                baseline=list(decision.proposal.labels_seen),
                marker=decision.comment_marker,
            )
        assert self.outcome is not None
        outcome = self.outcome
        return Change(
            issue=outcome.issue,
            add=list(outcome.add_labels),
            remove=list(outcome.remove_labels),
            comment=outcome.comment_body,
            close=False,
            baseline=list(outcome.labels_seen),
            marker=comment_marker("outcome", outcome.pk),
        )

    @property
    def is_settled(self) -> bool:
        return self.state in (
            Write.State.APPLIED,
            Write.State.FAILED,
            Write.State.CONFLICT,
            Write.State.WITHDRAWN,
        )

    @property
    def undo_seconds_left(self) -> int:
        """Seconds left to undo: a queued write that has not reached its due time."""
        if self.state != Write.State.QUEUED or self.attempts:
            return 0
        return max(0, math.ceil((self.due_at - timezone.now()).total_seconds()))


class RotationWeek(models.Model):
    """Who is oncall for a queue in the week that starts on `week_start` (a Monday)."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="rotation")
    week_start = models.DateField()
    oncall = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    # Written by this week's oncall for the next one: open threads, issues waiting on reporters.
    handoff_note = models.TextField(blank=True)
    handoff_written_at = models.DateTimeField(null=True, blank=True)
    # When this week's oncall was shown the previous week's note: it is shown once.
    handoff_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["queue", "week_start"]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "week_start"], name="rotation_one_oncall_a_week"
            )
        ]

    def __str__(self) -> str:
        return f"{self.queue} week of {self.week_start}: {self.oncall}"


class TeamMembership(models.Model):
    """A user was an active member of a GitHub team when GitHub was last asked (sign-in, beat).

    The deciding views read only this: GitHub is never asked inside a request."""

    team = models.CharField(max_length=140, validators=[GITHUB_TEAM])
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="github_teams"
    )
    checked_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_team")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team}"


class Meeting(models.Model):
    """One triage-review meeting; its agenda is kept once the meeting is over."""

    date = models.DateField(unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-date"]

    def __str__(self) -> str:
        return f"Triage review {self.date}"


class AgendaItem(models.Model):
    class Status(models.TextChoices):
        OPEN = "open"
        DECIDED = "decided"
        ROLLED_OVER = "rolled over"

    class Outcome(models.TextChoices):
        HIGH_PRIORITY = "high priority", "High priority confirmed"
        NOT_PRIORITY = "not a priority", "Not a priority"
        NEEDS_REPRODUCTION = "needs reproduction", "Needs reproduction"
        LABELS = "labels", "Labels only"

    meeting = models.ForeignKey(Meeting, on_delete=models.CASCADE, related_name="items")
    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="agenda_items")
    queue = models.ForeignKey(Queue, on_delete=models.SET_NULL, null=True, blank=True)
    # Why it is on the agenda: "escalated in the console", "labelled triage review on GitHub",
    # "the proposal suggests escalation: ...", "rolled over from <date>".
    reasons = models.JSONField(default=list)
    escalation = models.ForeignKey(Decision, on_delete=models.SET_NULL, null=True, blank=True)
    rolled_from = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True)
    status = models.CharField(max_length=12, choices=Status, default=Status.OPEN)
    outcome = models.CharField(max_length=20, choices=Outcome, blank=True)
    owner = models.CharField(max_length=100, blank=True)
    add_labels = models.JSONField(default=list)
    remove_labels = models.JSONField(default=list)
    comment_body = models.TextField(blank=True)
    note = models.TextField(blank=True)
    labels_seen = models.JSONField(default=list)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True
    )
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["meeting", "issue"], name="agenda_issue_once_a_meeting")
        ]

    def __str__(self) -> str:
        return f"{self.issue} on {self.meeting}"


class WebhookDelivery(models.Model):
    """A GitHub delivery taken: its id is accepted once, so a replayed delivery is refused."""

    delivery_id = models.CharField(max_length=100, unique=True)
    event = models.CharField(max_length=50)
    received_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.event} {self.delivery_id}"


class Verdict(models.Model):
    """What a human made of a proposal, stored with the decision so that reports count and
    filter in the database (`triage.judging` says how it is judged)."""

    decision = models.OneToOneField(
        Decision, on_delete=models.CASCADE, primary_key=True, related_name="verdict"
    )
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="+")
    decided_at = models.DateTimeField()
    # False once a later decision of the same proposal (after an undo) took its place.
    current = models.BooleanField(default=True)
    outcome = models.CharField(max_length=10)
    tier = models.CharField(max_length=6)

    class Meta:
        indexes = [
            # A drill-down's page reads it backwards, ties broken by decision.
            models.Index(
                fields=["queue", "decided_at", "decision"],
                condition=Q(current=True),
                name="verdict_current_by_time",
            ),
            models.Index(
                fields=["decided_at"], condition=Q(current=True), name="verdict_current_time"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.outcome} ({self.decision_id})"

    @classmethod
    def record(cls, decision: Decision) -> Verdict:
        """Judge a new decision, in the caller's transaction; it replaces the proposal's earlier
        verdict, as a report counts only a proposal's last decision."""
        proposal = decision.proposal
        judgement = judging.judge(decision, loader.load(proposal.queue.rubric))
        cls.objects.filter(decision__proposal=proposal, current=True).update(current=False)
        verdict = cls.objects.create(
            decision=decision,
            queue_id=proposal.queue_id,
            decided_at=decision.decided_at,
            outcome=judgement.outcome,
            tier=proposal.tier,
        )
        VerdictLabel.objects.bulk_create(
            VerdictLabel(
                verdict=verdict,
                label=label,
                proposed=label in judgement.proposed,
                approved=label in judgement.approved,
            )
            for label in sorted(judgement.proposed | judgement.approved)
        )
        VerdictRule.objects.bulk_create(
            VerdictRule(verdict=verdict, rule=rule, kept=rule in judgement.kept_rules)
            for rule in judgement.rules
        )
        return verdict


class VerdictLabel(models.Model):
    verdict = models.ForeignKey(Verdict, on_delete=models.CASCADE, related_name="labels")
    label = models.CharField(max_length=200)
    proposed = models.BooleanField()
    approved = models.BooleanField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["verdict", "label"], name="verdict_label_once")
        ]
        indexes = [models.Index(fields=["label"])]

    def __str__(self) -> str:
        return self.label


class VerdictRule(models.Model):
    verdict = models.ForeignKey(Verdict, on_delete=models.CASCADE, related_name="rules")
    rule = models.CharField(max_length=100)
    kept = models.BooleanField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["verdict", "rule"], name="verdict_rule_once")
        ]
        indexes = [models.Index(fields=["rule"])]

    def __str__(self) -> str:
        return self.rule


def with_label[M: (Issue, Proposal)](queryset: QuerySet[M], field: str, label: str) -> QuerySet[M]:
    """The rows whose JSON list `field` (a path such as "issue__labels") holds `label`."""
    if connection.features.supports_json_field_contains:
        return queryset.filter(**{f"{field}__contains": [label]})
    # SQLite (the demo) cannot look inside a JSON list: filter the ids here instead.
    ids = [pk for pk, labels in queryset.values_list("pk", field) if label in (labels or [])]
    return queryset.filter(pk__in=ids)


class SimilarIssue(models.Model):
    """One of an issue's most similar issues in its repository, as a worker found it
    (triage.similar); the issue page reads these rows and never computes."""

    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="similar_issues")
    similar = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="+")
    rank = models.PositiveSmallIntegerField()
    # Cosine similarity of the two issues' TF-IDF vectors, from 0 to 1.
    score = models.FloatField()
    # Why: the shared words and traceback frames that weigh most, heaviest first.
    shared_terms = models.JSONField(default=list)
    shared_frames = models.JSONField(default=list)
    computed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issue", "rank"], name="similar_issue_rank_once")
        ]

    def __str__(self) -> str:
        return f"{self.issue_id} ~ {self.similar_id} ({self.score:.2f})"

    @property
    def possible_duplicate(self) -> bool:
        """Very close to an earlier issue: the later one is the duplicate."""
        return (
            self.score >= settings.TRIAGE_DUPLICATE_SCORE
            and self.similar.number < self.issue.number
        )
