"""Fault injection on the outbox: decisions on many issues while things break at random.

    DATABASE_URL=postgres://... REDIS_URL=redis://... .venv/bin/python benchmarks/faults.py --faults 200

Runs a real Celery worker (prefork, two processes) on the PostgreSQL and Redis that DATABASE_URL
and REDIS_URL name, against the GitHub stand-in, and injects, at random moments: GitHub 5xx,
timeouts, secondary and primary rate limits, 404 and 422, humans editing the labels a decision
touches, `kill -9` of a worker process in the middle of its work, PostgreSQL connections
terminated, and (with --redis-restarts) Redis restarted. Then it stops injecting, retries what
failed as an oncall would, lets beat's re-sender finish, and checks every approved decision
against the stand-in. The last line:

    faults=N applied=A lost=L duplicated=D conflicts=C unreal_conflicts=U

lost: an approval not on GitHub and not a conflict; duplicated: a second comment of the
console's, or a label added again after a human removed it; unreal_conflicts: a conflict on an
issue no human touched. The database must be migrated; the run adds its own issues to it.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

# A decision adds these and posts a comment; the issue starts with `oncall: pt2` only.
ADDED = ["module: dynamo", "triaged"]
REPO = "pytorch/pytorch"


@dataclass
class Result:
    faults: int = 0
    applied: int = 0
    lost: int = 0
    duplicated: int = 0
    conflicts: int = 0
    unreal_conflicts: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"faults={self.faults} applied={self.applied} lost={self.lost} "
            f"duplicated={self.duplicated} conflicts={self.conflicts} "
            f"unreal_conflicts={self.unreal_conflicts}"
        )


class Worker:
    """`celery worker` in a process of its own, started again whenever it dies (as compose's
    restart policy does)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def ensure(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        self.starts += 1
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "console",
                    "worker",
                    "--pool=prefork",
                    "--concurrency=2",
                    "-l",
                    "warning",
                    "-n",
                    f"faults-{os.getpid()}-{self.starts}@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                ],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill_a_child(self) -> bool:
        """kill -9 one of the pool's processes, whatever it is doing."""
        if self.process is None:
            return False
        found = subprocess.run(
            ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True, check=False
        )
        children = [int(pid) for pid in found.stdout.split()]
        if not children:
            return False
        os.kill(random.choice(children), signal.SIGKILL)
        return True

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


def restart_redis() -> None:
    subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", "6379", "shutdown", "nosave"],
        capture_output=True,
        check=False,
    )
    time.sleep(0.3)
    subprocess.run(
        [
            "redis-server",
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "--port",
            "6379",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        capture_output=True,
        check=False,
    )
    for _ in range(50):
        ping = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", "6379", "ping"],
            capture_output=True,
            text=True,
            check=False,
        )
        if ping.stdout.strip() == "PONG":
            return
        time.sleep(0.1)


def terminate_other_connections() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def run(
    faults: int,
    issues: int,
    *,
    seed: int,
    database_url: str,
    redis_restarts: bool,
    log: Path,
    settle_seconds: float = 240.0,
) -> Result:
    from django.conf import settings
    from django.utils import timezone

    from triage import ingest, outbox
    from triage.models import Proposal, Queue, Write
    from triage.proposing import propose
    from triage.standins.github import GitHubStandIn
    from triage.tasks import send_write

    random.seed(seed)
    result = Result()
    standin = GitHubStandIn().start()
    standin.add_repo(REPO)
    queue = Queue.objects.get(slug="pt2")
    user = _oncall()
    next_number = 700_000 + random.randrange(100_000) * 10
    writes: dict[int, int] = {}  # issue number -> write id

    def add_decisions(count: int) -> None:
        nonlocal next_number
        for _ in range(count):
            number = next_number
            next_number += 1
            raw = _raw_issue(number)
            standin.add_issue(REPO, raw)
            issue, _ = ingest.upsert(REPO, ingest.parse(raw))
            proposal = propose(issue, queue)
            assert proposal is not None and proposal.status == Proposal.Status.PENDING
            decision = outbox.decide(
                proposal,
                kind="edit",
                user=user,
                add_labels=ADDED,
                remove_labels=[],
                comment_body=f"Thanks: triaged by the fault run ({number}).",
                close=False,
                note="",
            )
            assert decision is not None
            writes[number] = decision.write.pk
            send_write(decision.write.pk)

    def open_numbers() -> list[int]:
        settled = set(
            Write.objects.filter(
                pk__in=writes.values(), state__in=[Write.State.APPLIED, Write.State.CONFLICT]
            ).values_list("pk", flat=True)
        )
        return [number for number, write_id in writes.items() if write_id not in settled]

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": database_url,
        "REDIS_URL": str(settings.CELERY_BROKER_URL),
        "SECRET_KEY": settings.SECRET_KEY,
        "GITHUB_API_URL": standin.url,
        "GITHUB_TOKEN": "",
        "GITHUB_SECONDS_BETWEEN_WRITES": "0",
        "GITHUB_TIMEOUT_SECONDS": "2",
        "GITHUB_BACKOFF_SECONDS": "0.5",
        "TRIAGE_WRITE_LEASE_SECONDS": "15",
        "TRIAGE_WRITE_MAX_ATTEMPTS": "1000",
        "TRIAGE_UNDO_SECONDS": "0",
        "PYTHONUNBUFFERED": "1",
    }
    worker = Worker(env, log)
    worker.ensure()
    add_decisions(issues)

    human_touched: dict[int, set[str]] = {}  # issue -> labels a human added or removed
    human_removed_after_apply: dict[int, set[str]] = {}
    kinds = ["5xx", "timeout", "secondary", "primary", "404", "422", "human", "kill", "pg"]
    if redis_restarts:
        kinds.append("redis")
    other_faults = 0
    last_sweep = time.monotonic()
    try:
        while standin.faults_fired + other_faults < faults:
            worker.ensure()
            pending = open_numbers()
            if len(pending) < issues // 2:
                add_decisions(issues // 2)
                continue
            kind = random.choice(kinds)
            number = random.choice(pending)
            path = rf"/repos/{REPO}/issues/{number}"
            if kind == "5xx":
                method, suffix = random.choice(
                    [("GET", "$"), ("POST", "/labels$"), ("POST", "/comments$")]
                )
                standin.inject(method, path + suffix, random.choice([500, 502, 503]))
            elif kind == "timeout":
                # Slower than the client waits: GitHub may still act after the client gave up.
                method, suffix = random.choice(
                    [("POST", "/labels$"), ("POST", "/comments$"), ("GET", "$")]
                )
                standin.inject(method, path + suffix, 0, delay=2.5)
            elif kind == "secondary":
                standin.inject("POST", path + "/labels$", 403, retry_after=1)
            elif kind == "primary":
                standin.inject("GET", path + "$", 403, rate_limit_reset=int(time.time()) + 1)
            elif kind == "404":
                standin.inject("GET", path + "$", 404)
            elif kind == "422":
                standin.inject("POST", path + "/labels$", 422)
            elif kind == "human":
                _human_edit(
                    standin, number, writes[number], human_touched, human_removed_after_apply
                )
                other_faults += 1
            elif kind == "kill":
                other_faults += worker.kill_a_child()
            elif kind == "pg":
                terminate_other_connections()
                other_faults += 1
            elif kind == "redis":
                restart_redis()
                other_faults += 1
            result.kinds[kind] = result.kinds.get(kind, 0) + 1
            if time.monotonic() - last_sweep > 2:
                _sweep(send_write)
                last_sweep = time.monotonic()
            time.sleep(random.uniform(0.02, 0.1))

        # The faults stop. What failed for good is retried, as an oncall presses Retry.
        standin.clear_faults()
        result.faults = standin.faults_fired + other_faults
        deadline = time.monotonic() + settle_seconds
        while time.monotonic() < deadline:
            worker.ensure()
            for write in Write.objects.filter(pk__in=writes.values(), state=Write.State.FAILED):
                if outbox.requeue(write):
                    send_write(write.pk)
            _sweep(send_write)
            if not open_numbers():
                break
            time.sleep(1)
    finally:
        worker.stop()
        standin.stop()

    _check(result, standin, writes, human_touched, human_removed_after_apply, timezone.now())
    return result


def _sweep(send_write: Any) -> None:
    from triage import outbox

    for write_id in outbox.due_for_resend():
        send_write(write_id)


def _human_edit(
    standin: Any,
    number: int,
    write_id: int,
    touched: dict[int, set[str]],
    removed_after: dict[int, set[str]],
) -> bool:
    """Someone edits the issue's labels on github.com: touching a label the decision adds."""
    from triage.models import Write

    labels = set(standin.label_names(REPO, number))
    label = random.choice(ADDED)
    state = Write.objects.filter(pk=write_id).values_list("state", flat=True).first()
    if label in labels:
        labels.discard(label)
        if state == Write.State.APPLIED:
            # The console added it; a human takes it off: it must not come back.
            removed_after.setdefault(number, set()).add(label)
    else:
        labels.add(label)
    touched.setdefault(number, set()).add(label)
    standin.set_labels(REPO, number, sorted(labels))
    return True


def _check(
    result: Result,
    standin: Any,
    writes: dict[int, int],
    touched: dict[int, set[str]],
    removed_after: dict[int, set[str]],
    now: Any,
) -> None:
    from triage.models import Write, comment_marker

    rows = {
        w.pk: w for w in Write.objects.filter(pk__in=writes.values()).select_related("decision")
    }
    for number, write_id in writes.items():
        write = rows[write_id]
        assert write.decision is not None
        marker = comment_marker("decision", write.decision.pk)
        mine = [
            c
            for c in standin.comments(REPO, number)
            if marker in c["body"] and c["user"]["login"] == standin.bot_login
        ]
        labels = set(standin.label_names(REPO, number))
        if len(mine) > 1:
            result.duplicated += 1
            result.details.append(f"#{number}: {len(mine)} comments")
        readded = removed_after.get(number, set()) & labels
        if readded:
            result.duplicated += 1
            result.details.append(f"#{number}: re-added {sorted(readded)}")
        if write.state == Write.State.CONFLICT:
            result.conflicts += 1
            if not touched.get(number):
                result.unreal_conflicts += 1
                result.details.append(
                    f"#{number}: conflict without a human edit: {write.last_error}"
                )
            continue
        if write.state != Write.State.APPLIED:
            result.lost += 1
            result.details.append(f"#{number}: write {write.state}: {write.last_error}")
            continue
        result.applied += 1
        withdrawn = set(write.sent.get("withdrawn_on_github", [])) | removed_after.get(
            number, set()
        )
        missing = set(ADDED) - labels - withdrawn - touched.get(number, set())
        if missing or not mine:
            result.lost += 1
            result.details.append(
                f"#{number}: applied but missing {sorted(missing)} / comment {len(mine)}"
            )


def _oncall() -> Any:
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="fault-run")
    return user


def _raw_issue(number: int) -> dict[str, Any]:
    stamp = "2026-11-01T00:00:00Z"
    return {
        "number": number,
        "title": f"Fault run issue {number}",
        "body": "torch._dynamo.exc.Unsupported: call_function in a compiled loop\n```python\nimport torch\n```",
        "state": "open",
        "labels": [{"name": "oncall: pt2"}],
        "user": {"login": "reporter"},
        "created_at": stamp,
        "updated_at": stamp,
        "html_url": f"https://github.com/{REPO}/issues/{number}",
        "comments": [],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=200)
    parser.add_argument("--issues", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--redis-restarts",
        action="store_true",
        help="also restart the Redis at 127.0.0.1:6379 (it must be a local one)",
    )
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or not os.environ.get(
        "REDIS_URL"
    ):
        parser.error("set DATABASE_URL (PostgreSQL) and REDIS_URL: the run needs real ones")

    # Beat's re-sender and the claim lease, at the pace of the run rather than of a day's work.
    os.environ.setdefault("TRIAGE_RESEND_AFTER_SECONDS", "3")
    os.environ.setdefault("TRIAGE_WRITE_LEASE_SECONDS", "15")
    os.environ.setdefault("TRIAGE_UNDO_SECONDS", "0")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    started = time.monotonic()
    result = run(
        args.faults,
        args.issues,
        seed=args.seed,
        database_url=os.environ["DATABASE_URL"],
        redis_restarts=args.redis_restarts,
        log=ROOT / "faults-worker.log",
    )
    print(f"issues={args.issues} seconds={time.monotonic() - started:.0f} kinds={result.kinds}")
    for detail in result.details[:20]:
        print(detail)
    print(result.line())


if __name__ == "__main__":
    main()
