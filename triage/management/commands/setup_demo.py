from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from triage import rotation
from triage.models import Queue, RotationWeek
from triage.roles import oncall_group

# username: (decides, admin)
DEMO_USERS = {
    "oncall": (True, False),
    "alice": (True, False),
    "viewer": (False, False),
    "admin": (True, True),
}


class Command(BaseCommand):
    help = (
        "Create the demo users (each one's password is its name) and a rotation in which the "
        "demo oncall has this week's pt2 queue, with a handoff note from last week's oncall."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        group = oncall_group()
        made = {}
        for username, (decides, admin) in DEMO_USERS.items():
            user, _ = users.objects.get_or_create(username=username)
            user.set_password(username)
            user.is_staff = user.is_superuser = admin
            user.save()
            if decides:
                user.groups.add(group)
            made[username] = user
        # Signing in with GitHub as the stand-in's @octo-oncall decides in pt2 (its team's queue).
        Queue.objects.filter(slug="pt2").update(github_team="pytorch/pt2-oncall")
        this_week = rotation.current_week()
        for queue in Queue.objects.all():
            rotation.round_robin(
                queue, [made["alice"], made["oncall"]], this_week - timedelta(weeks=1), 6
            )
        # The note is pt2's: the other queues' weeks must not show it.
        RotationWeek.objects.filter(
            queue__slug="pt2", week_start=this_week - timedelta(weeks=1)
        ).update(
            handoff_note="Two reporters owe us a reproducer; the flex attention NaN may be a regression."
        )
        self.stdout.write(
            "demo users: oncall/oncall (oncall this week), alice/alice, viewer/viewer (read only), "
            "admin/admin (plans the rotation); Sign in with GitHub: @octo-oncall (decides in pt2)"
        )
