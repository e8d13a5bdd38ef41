"""The whole loop with a real Celery worker process on Redis, against the GitHub stand-in.

sync (worker) -> proposals (worker) -> a human accepts in the console (this process, real view)
-> the write is applied (worker) -> the labels and the comment are on "GitHub".

The worker runs in its own process, so it only sees committed rows: hence `transactional_db`,
and the test database's name handed to it in DATABASE_URL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from console.celery import app as celery_app
from tests.factories import PT2_BODY, REPO, ensure_default_queues, make_user, raw_issue
from triage.models import Decision, Issue, Proposal, Queue, Write
from triage.proposing import issue_input
from triage.rubric import engine, loader
from triage.tasks import sync_queue

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from triage.standins.github import GitHubStandIn

STARTUP_SECONDS = 30.0
POLL_SECONDS = 30.0
PT2 = "oncall: pt2"

# What the pt2 rubric makes of these bodies (checked against the engine in the test):
# a graph break with a reproducer -> `module: dynamo`, and triage is done: `triaged`;
# a described failure with no code, trace or error at all -> `needs reproduction`;
NO_REPRO_BODY = (
    "### 🐛 Describe the bug\n\n"
    "My model fails somewhere inside torch.compile with an odd message after a few steps of "
    "training. It happens on every machine we tried, with every nightly of the last month. I "
    "can't share the code or the model, and I have not managed to make it smaller yet.\n"
)
# a DTensor failure raised in DTensor's own code, no reproducer -> hand it to distributed: add
# `module: dtensor`, `oncall: distributed` and `needs reproduction`, remove `oncall: pt2`, and
# ask for a reproducer in a comment.
DTENSOR_NO_REPRO_BODY = (
    "### 🐛 Describe the bug\n\n"
    "Our DTensor model fails at the first step, and the assertion is raised from "
    "torch/distributed/tensor/_sharding_prop.py even with the compiler switched off. I can't "
    "share the model, and I have not managed to make it any smaller yet.\n"
)


@dataclass
class RunningWorker:
    process: subprocess.Popen[bytes]
    nodename: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def tail(self, lines: int = 80) -> str:
        return "\n".join(self.log().splitlines()[-lines:])


def wait_for[T](
    what: str, check: Callable[[], T | None], worker: RunningWorker, timeout: float
) -> T:
    """Poll `check` until it returns something truthy; fail with the worker's log otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        code = worker.process.poll()
        if code is not None:
            pytest.fail(
                f"the Celery worker exited ({code}) while waiting for {what}\n"
                f"--- worker log ---\n{worker.tail()}"
            )
        if time.monotonic() > deadline:
            pytest.fail(
                f"gave up after {timeout:.0f} s waiting for {what}\n"
                f"--- worker log ---\n{worker.tail()}"
            )
        time.sleep(0.1)


def worker_database_url() -> str:
    """The test database (not the one in DATABASE_URL), for the worker's own DATABASE_URL."""
    db = connection.settings_dict
    auth = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"], safe="")
    host = db["HOST"] or "127.0.0.1"
    port = db["PORT"] or 5432
    return f"postgres://{auth}@{host}:{port}/{quote(db['NAME'], safe='')}"


@pytest.fixture
def celery_worker(
    transactional_db: None, standin: GitHubStandIn, tmp_path: Path
) -> Iterator[RunningWorker]:
    """`celery -A console worker --pool=solo` on the test's broker and test database."""
    broker = str(settings.CELERY_BROKER_URL)
    if connection.vendor != "postgresql" or not broker.startswith("redis"):
        pytest.skip("needs PostgreSQL and Redis (DATABASE_URL / REDIS_URL, as scripts/test sets)")
    assert celery_app.conf.broker_url == broker
    assert not celery_app.conf.task_always_eager, "the test process must send tasks to Redis"

    # Leftovers of an earlier, interrupted run would be executed by our worker.
    celery_app.control.purge()
    nodename = f"test-{uuid.uuid4().hex[:8]}@%h"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": worker_database_url(),
        "REDIS_URL": broker,
        "SECRET_KEY": settings.SECRET_KEY,
        "GITHUB_API_URL": standin.url,
        "GITHUB_TOKEN": "",
        "GITHUB_SECONDS_BETWEEN_WRITES": "0",
        "PYTHONUNBUFFERED": "1",
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "console",
                "worker",
                "--pool=solo",
                "--concurrency=1",
                "-l",
                "info",
                "-n",
                nodename,
                # Nothing to gossip or mingle with: saves a second or two of start-up.
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = RunningWorker(process, nodename.replace("%h", ""), log_path)
    try:

        def ready() -> list[str] | None:
            replies = celery_app.control.ping(timeout=0.5) or []
            names = [name for reply in replies for name in reply]
            return names if any(name.startswith(worker.nodename) for name in names) else None

        nodes = wait_for("the worker to answer a ping", ready, worker, STARTUP_SECONDS)
        others = [name for name in nodes if not name.startswith(worker.nodename)]
        assert not others, f"other workers consume this broker and would steal tasks: {others}"
        yield worker
    finally:
        # Before transactional_db's flush: the worker must not hold connections or run tasks.
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        # Shown by pytest only when the test fails.
        print(f"--- celery worker log ({worker.nodename}) ---\n{worker.log()}")


@pytest.mark.worker
def test_sync_propose_accept_and_write_back_through_a_real_worker(
    transactional_db: None, standin: GitHubStandIn, celery_worker: RunningWorker
) -> None:
    queue = ensure_default_queues()
    # Recent, so that the first sync (the last TRIAGE_FIRST_SYNC_DAYS) reads them.
    start = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    bodies = {
        4101: ("Graph break under torch.compile", PT2_BODY),
        4102: ("Fails under torch.compile", NO_REPRO_BODY),
        4103: ("Sharding propagation fails on the first step", DTENSOR_NO_REPRO_BODY),
    }
    for offset, (number, (title, body)) in enumerate(bodies.items()):
        seeded = start + timedelta(minutes=offset)
        standin.add_issue(
            REPO, raw_issue(number, title=title, body=body, labels=(PT2,), created=seeded)
        )
    numbers = sorted(bodies)

    # 1. The worker syncs the queue and proposes for every issue.
    sync_queue.delay(queue.pk)

    def all_proposed() -> list[Proposal] | None:
        pending = list(
            Proposal.objects.filter(queue=queue, status=Proposal.Status.PENDING)
            .select_related("issue")
            .order_by("issue__number")
        )
        return pending if [p.issue.number for p in pending] == numbers else None

    proposals = wait_for(
        f"a pending proposal for each of {numbers}", all_proposed, celery_worker, POLL_SECONDS
    )
    queue.refresh_from_db()
    assert queue.sync_state == Queue.SyncState.IDLE
    assert queue.sync_seen == len(numbers)
    assert queue.sync_error == ""
    rubric = loader.load("pt2")
    for proposal in proposals:
        # What the worker computed is what the rule engine makes of the synced issue.
        draft = engine.propose(rubric, issue_input(proposal.issue))
        assert (proposal.add_labels, proposal.remove_labels, proposal.comment_body) == (
            list(draft.add),
            list(draft.remove),
            draft.comment,
        )
        assert proposal.labels_seen == [PT2]
    assert [p.add_labels for p in proposals] == [
        ["module: dynamo", "triaged"],
        ["needs reproduction"],
        ["module: dtensor", "oncall: distributed", "needs reproduction"],
    ]
    chosen = proposals[2]
    assert chosen.remove_labels == [PT2]
    assert chosen.comment_template == "request-repro"
    assert chosen.comment_body

    # 2. An oncall accepts it through the console; the write goes to Redis once committed.
    client = Client()
    client.force_login(make_user("oncall", oncall=True))  # type: ignore[arg-type]
    response = client.post(reverse("decide", args=[chosen.pk]), {"kind": "accept"})
    assert response.status_code == 302, response.content.decode()[:2000]
    decision = Decision.objects.get(proposal=chosen)
    assert decision.kind == Decision.Kind.ACCEPT
    write = Write.objects.get(decision=decision)

    # 3. The worker applies it.
    def settled() -> Write | None:
        current = Write.objects.get(pk=write.pk)
        if current.state in (Write.State.FAILED, Write.State.CONFLICT):
            pytest.fail(
                f"write {current.pk} ended {current.state}: {current.last_error}\n"
                f"--- worker log ---\n{celery_worker.tail()}"
            )
        return current if current.state == Write.State.APPLIED else None

    write = wait_for(f"write {write.pk} to be applied", settled, celery_worker, POLL_SECONDS)
    assert write.attempts == 1
    assert write.last_error == ""
    assert write.applied_at is not None

    # 4. GitHub now carries exactly the accepted change.
    number = chosen.issue.number
    added = ["module: dtensor", "oncall: distributed", "needs reproduction"]
    on_github = standin.label_names(REPO, number)
    assert sorted(on_github) == sorted(added)
    assert PT2 not in on_github
    marker = decision.comment_marker
    assert marker.startswith("<!-- triage-console:") and "decision:" not in marker
    posted = [c for c in standin.comments(REPO, number) if marker in c["body"]]
    assert len(posted) == 1, posted
    assert posted[0]["body"] == f"{chosen.comment_body.rstrip()}\n\n{marker}"
    assert posted[0]["user"]["login"] == standin.bot_login

    issue_path = f"/repos/{REPO}/issues/{number}"
    writes = standin.writes()
    assert [(w.method, w.decoded_path) for w in writes] == [
        ("POST", f"{issue_path}/comments"),
        ("POST", f"{issue_path}/labels"),
        ("DELETE", f"{issue_path}/labels/{PT2}"),
    ]
    assert writes[1].json == added
    assert write.sent == {
        "added": added,
        "removed": [PT2],
        "comment_id": posted[0]["id"],
        "closed": False,
    }

    # 5. The console's copy follows, and nothing else was touched.
    assert Issue.objects.get(number=number).labels == sorted(added)
    assert Proposal.objects.get(pk=chosen.pk).status == Proposal.Status.DECIDED
    for other in proposals[:2]:
        assert Proposal.objects.get(pk=other.pk).status == Proposal.Status.PENDING
        assert standin.label_names(REPO, other.issue.number) == [PT2]
        assert standin.comments(REPO, other.issue.number) == []
    assert "triage.tasks.sync_queue" in celery_worker.log()
    assert "triage.tasks.apply_write" in celery_worker.log()
