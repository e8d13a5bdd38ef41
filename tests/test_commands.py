from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse

from tests.factories import REPO, raw_issue
from triage.models import Queue

pytestmark = pytest.mark.django_db


def test_setup_demo_makes_the_demo_oncall_this_week_s_pt2_oncall(client):
    call_command("setup_demo", stdout=StringIO())
    call_command("setup_demo", stdout=StringIO())  # twice is harmless
    users = get_user_model().objects
    assert users.get(username="oncall").has_perm("triage.decide")
    assert not users.get(username="viewer").has_perm("triage.decide")
    assert users.get(username="admin").is_staff

    assert client.login(username="oncall", password="oncall")
    landing = client.get(reverse("home"))
    assert landing["Location"] == reverse("inbox", args=["pt2"])
    assert "Two reporters owe us a reproducer" in client.get(landing["Location"]).content.decode()


def test_sync_queues_syncs_every_queue_or_the_named_ones(
    standin, django_capture_on_commit_callbacks
):
    standin.add_issue(REPO, raw_issue(1, created=None))
    Queue.objects.update(sync_cursor=None)
    out = StringIO()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("sync_queues", "pt2", stdout=out)
    assert out.getvalue().startswith("pt2: idle, ")
    assert Queue.objects.exclude(slug="pt2").filter(sync_finished_at__isnull=False).count() == 0
    assert Queue.objects.get(slug="pt2").sync_finished_at is not None
