from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from triage.roles import oncall_group

DEMO_USERS = {"oncall": True, "viewer": False}


class Command(BaseCommand):
    help = "Create the demo users: oncall/oncall (may decide) and viewer/viewer (read only)."

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        group = oncall_group()
        for username, decides in DEMO_USERS.items():
            user, _ = users.objects.get_or_create(username=username)
            user.set_password(username)
            user.save()
            if decides:
                user.groups.add(group)
        self.stdout.write("demo users: oncall/oncall, viewer/viewer")
