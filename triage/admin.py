from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin, messages

from triage import tasks
from triage.models import (
    Decision,
    Issue,
    LearnedModel,
    Meeting,
    Proposal,
    Queue,
    TeamMembership,
    Write,
)

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from django.http import HttpRequest


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin[Queue]):
    list_display = [
        "slug",
        "name",
        "repository",
        "proposer",
        "github_team",
        "deciders",
        "sync_state",
    ]
    actions = ["train_models"]

    @admin.action(description="Train the learned model on the queue's labelled history")
    def train_models(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        for queue in queryset:
            tasks.train_model.delay_on_commit(queue.pk)
        self.message_user(
            request,
            f"Training {queryset.count()} queue(s) in the background: each gets a new model "
            "version unless its labelled issues are those of the last one.",
            messages.INFO,
        )

    readonly_fields = [
        "sync_state",
        "sync_started_at",
        "sync_finished_at",
        "sync_seen",
        "sync_error",
    ]


@admin.register(Issue)
class IssueAdmin(admin.ModelAdmin[Issue]):
    list_display = ["repository", "number", "title", "state", "updated_at"]
    search_fields = ["title", "number"]


@admin.register(Proposal)
class ProposalAdmin(admin.ModelAdmin[Proposal]):
    list_display = ["pk", "issue", "queue", "status", "tier", "score", "created_at"]
    list_filter = ["queue", "status", "tier"]

    # The history is the record rubric tuning is based on: read it here, never edit it.
    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Decision)
class DecisionAdmin(admin.ModelAdmin[Decision]):
    list_display = ["pk", "proposal", "kind", "decided_by", "decided_at"]
    list_filter = ["kind"]

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(LearnedModel)
class LearnedModelAdmin(admin.ModelAdmin[LearnedModel]):
    list_display = ["queue", "version", "trained_at", "examples", "source", "rubric_version"]
    list_filter = ["queue"]
    exclude = ["fitted"]

    # Versions are made by training (train_model, the beat task, the queue's admin action).
    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Write)
class WriteAdmin(admin.ModelAdmin[Write]):
    list_display = ["pk", "decision", "state", "attempts", "applied_at"]
    list_filter = ["state"]

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


# A meeting opened on a wrong date is corrected or deleted here: its open items go back to
# the next meeting when it is refreshed.
@admin.register(Meeting)
class MeetingAdmin(admin.ModelAdmin[Meeting]):
    list_display = ["date", "created_at", "ended_at"]
    date_hierarchy = "date"


# What GitHub said at the last check (sign-in, beat): read here, changed only by asking again.
@admin.register(TeamMembership)
class TeamMembershipAdmin(admin.ModelAdmin[TeamMembership]):
    list_display = ["user", "team", "checked_at"]
    list_filter = ["team"]

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False
