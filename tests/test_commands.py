from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse

from tests.factories import REPO, raw_issue
from triage.models import Queue
from triage.roles import may_decide

pytestmark = pytest.mark.django_db


def test_setup_demo_makes_the_demo_oncall_this_week_s_pt2_oncall(client):
    call_command("setup_demo", stdout=StringIO())
    call_command("setup_demo", stdout=StringIO())  # twice is harmless
    users = get_user_model().objects
    assert users.get(username="oncall").has_perm("triage.decide")
    assert not users.get(username="viewer").has_perm("triage.decide")
    assert users.get(username="admin").is_staff
    # The demo's password oncalls decide in every queue; its GitHub sign-in decides in pt2.
    assert all(may_decide(users.get(username="alice"), queue) for queue in Queue.objects.all())
    assert Queue.objects.get(slug="pt2").github_team == "pytorch/pt2-oncall"

    assert client.login(username="oncall", password="oncall")
    landing = client.get(reverse("home"))
    assert landing["Location"] == reverse("inbox", args=["pt2"])
    assert "Two reporters owe us a reproducer" in client.get(landing["Location"]).content.decode()
    # pt2's note is pt2's: the other inboxes do not show it.
    for slug in ("distributed", "triage"):
        inbox = client.get(reverse("inbox", args=[slug])).content.decode()
        assert "Two reporters owe us a reproducer" not in inbox, slug


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


def test_backtest_on_an_unmigrated_database_says_what_to_run(tmp_path):
    import os
    import subprocess
    import sys

    from django.conf import settings

    env = {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}",
        "DEBUG": "1",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "backtest", "--queue", "pt2", "triage/devset/issues.jsonl"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "run `python manage.py migrate` first" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_demo_login_page_names_all_four_demo_users(client, settings):
    settings.TRIAGE_DEMO = True
    from django.urls import reverse as url_of

    html = client.get(url_of("login")).content.decode()
    for user in ("oncall", "alice", "viewer", "admin"):
        assert f"<code>{user}</code>" in html, user
