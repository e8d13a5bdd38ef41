from __future__ import annotations

from django.contrib import admin

from triage.models import Decision, Issue, Meeting, Proposal, Queue, TeamMembership, Write


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin[Queue]):
    list_display = ["slug", "name", "repository", "github_team", "deciders", "sync_state"]
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
