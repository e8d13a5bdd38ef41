"""The two roles: an oncall may decide; anyone else who can log in may only read."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

ONCALL_GROUP = "oncall"


def oncall_group() -> Group:
    group, _ = Group.objects.get_or_create(name=ONCALL_GROUP)
    group.permissions.add(
        Permission.objects.get(content_type__app_label="triage", codename="decide")
    )
    return group
