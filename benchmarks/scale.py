"""Pages at scale: synthetic issues, proposals and decisions, then every page timed.

    DATABASE_URL=postgres://... .venv/bin/python benchmarks/scale.py --issues 10000 --decisions 10000

Works in a database of its own (Django's test database, `test_<name>`, made and dropped here),
never in the one DATABASE_URL names. Generates issues in GitHub's REST shape (2-8 KB bodies
with tracebacks, comments, the three queues' labels), imports them with `import_issues` (in a
process of its own, for its peak memory; it proposes too), proposes them again in this process
to time the rules alone, decides `--decisions` of them through the outbox, each with its
verdict and write (`--issues` stay pending), then requests every page 20 times as a logged-in
oncall with DEBUG off: p50/p95, SQL queries, bytes and the peak of Python memory. Last, a first
sync of `--sync-issues` issues from the GitHub stand-in (requests made) and an unchanged poll.
Prints a table, then one JSON object as its last line. Celery workers are not measured here.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("SECRET_KEY", "benchmark-only")

REPO = "pytorch/pytorch"
START = datetime(2026, 1, 5, tzinfo=UTC)
FRAMES = [
    ("_dynamo/symbolic_convert", "step", "self.dispatch_table[inst.opcode](self, inst)"),
    ("_inductor/compile_fx", "fw_compiler_base", "return inner_compile(model, example_inputs)"),
    ("_inductor/scheduler", "fuse_nodes", "nodes = self.fuse_nodes_once(nodes)"),
    ("distributed/fsdp/_fully_shard/_fsdp_param", "reset_sharded_param", "self._sharded = x"),
    ("_subclasses/fake_tensor", "dispatch", "return self._cached_dispatch_impl(func, args)"),
]
OPENINGS = [
    "torch.compile fails with a graph break: torch._dynamo.exc.Unsupported: call_function",
    "With mark_dynamic the compiled model recompiles every step (dynamic shapes).",
    "Inductor produces wrong results compared to eager on CUDA.",
    "FSDP2 fully_shard hangs at the first all_gather on 8 GPUs with NCCL.",
    "DTensor redistribute from Shard(0) to Replicate gives a wrong shape.",
    "torch.export fails with a data-dependent guard on a nonzero call.",
]
LABELS = [["oncall: pt2"], ["oncall: distributed"], []]


def raw_issue(number: int, rng: random.Random) -> dict[str, Any]:
    opening = rng.choice(OPENINGS)
    lines = ["### 🐛 Describe the bug", "", opening, "", "```python", "import torch"]
    lines += [f"x{i} = torch.randn({i + 2}, 8)" for i in range(rng.randint(2, 8))]
    lines += ["```", "", "```", "Traceback (most recent call last):"]
    size = rng.randint(2_000, 8_000)
    while sum(len(line) + 1 for line in lines) < size:
        module, function, code = rng.choice(FRAMES)
        lines.append(f'  File "/opt/conda/lib/python3.12/site-packages/torch/{module}.py", ')
        lines.append(f"line {rng.randint(10, 4000)}, in {function}\n    {code}")
    lines += ["```", "", "### Versions", "PyTorch version: 2.10.0", "[pip3] numpy==2.1.0"]
    created = START + timedelta(minutes=7 * number)
    return {
        "number": number,
        "title": f"{opening[:60]} ({number})",
        "body": "\n".join(lines),
        "state": "open",
        "labels": [{"name": label} for label in rng.choice(LABELS)],
        "user": {"login": f"reporter{number % 97}"},
        "created_at": created.isoformat(),
        "updated_at": created.isoformat(),
        "html_url": f"https://github.com/{REPO}/issues/{number}",
        "comments": [
            {
                "id": number * 10 + i,
                "user": {"login": "maintainer"},
                "body": "Can you try with TORCH_LOGS=+dynamo?",
                "created_at": created.isoformat(),
            }
            for i in range(rng.choice((0, 0, 1, 2)))
        ],
    }


PROPOSING_SAMPLE = 20_000
DECIDING_PROCESSES = 2


def _decide_share(proposal_ids: list[int], user_id: int, seed: int) -> None:
    """Decide these proposals through the outbox, 200 to a commit (in a forked process)."""
    from django.contrib.auth import get_user_model
    from django.db import connections, transaction

    from triage import outbox
    from triage.models import Proposal

    connections.close_all()  # the parent's connection is not this process's to use
    rng = random.Random(seed)
    user = get_user_model().objects.get(pk=user_id)
    kinds = ("accept", "accept", "edit", "escalate", "reject")
    for at in range(0, len(proposal_ids), 200):
        batch = Proposal.objects.select_related("issue", "queue").in_bulk(
            proposal_ids[at : at + 200]
        )
        with transaction.atomic():
            for proposal in batch.values():
                kind = rng.choice(kinds)
                add = [] if kind == "reject" else list(proposal.add_labels)
                if kind == "edit":
                    add = [*add[1:], "module: inductor"]
                outbox.decide(
                    proposal,
                    kind=kind,
                    user=user,
                    add_labels=add,
                    remove_labels=[],
                    comment_body="",
                    close=False,
                    note="bench",
                )
    connections.close_all()


def populate(
    issues: int, decisions: int, seed: int, database_url: str, *, with_workers: bool
) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.db import connections

    from triage import proposing
    from triage.models import Issue, Proposal, Queue

    rng = random.Random(seed)
    # Each issue is in one queue: as many more issues as decisions leaves `issues` pending.
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as handle:
        for number in range(1, issues + decisions + 1):
            handle.write(json.dumps(raw_issue(number, rng)) + "\n")
    size_mb = Path(handle.name).stat().st_size / 1e6
    # import_issues in a process of its own, to read its peak memory; it proposes too (tasks
    # run in that process), and proposing is timed again below on its own.
    env = os.environ | {"DATABASE_URL": database_url}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "import_issues", handle.name],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    imported = time.perf_counter() - started
    import_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1000
    os.unlink(handle.name)

    # The rules alone, timed on a sample proposed again: import_issues proposed every issue.
    ids = list(Issue.objects.order_by("pk").values_list("pk", flat=True)[:PROPOSING_SAMPLE])
    Proposal.objects.filter(issue_id__in=ids).delete()
    started = time.perf_counter()
    sampled = 0
    for queue in Queue.objects.all():
        sampled += proposing.propose_many(queue, ids)
    proposing_s = time.perf_counter() - started
    if with_workers:
        # Every issue proposed again by workers, timed; they leave every proposal made.
        expected = sampled * (issues + decisions) // max(len(ids), 1)
        workers = time_workers(database_url, expected)
    else:
        # An import_issues that enqueued its proposals (REDIS_URL) left the rest to do here.
        workers = {}
        rest = list(Issue.objects.filter(proposals__isnull=True).values_list("pk", flat=True))
        for queue in Queue.objects.all():
            proposing.propose_many(queue, rest)
    made = Proposal.objects.count()

    user = get_user_model().objects.create_user("bench", password="bench")
    user.user_permissions.add(Permission.objects.get(codename="decide"))
    started = time.perf_counter()
    pending = list(
        Proposal.objects.filter(status="pending").order_by("?").values_list("pk", flat=True)
    )
    chosen = pending[:decisions]
    shares = [chosen[index::DECIDING_PROCESSES] for index in range(DECIDING_PROCESSES)]
    # Setting up is not what this measures: the decisions are made by a few processes at once.
    connections.close_all()
    context = multiprocessing.get_context("fork")
    with context.Pool(DECIDING_PROCESSES) as pool:
        pool.starmap(
            _decide_share, [(share, user.pk, seed + index) for index, share in enumerate(shares)]
        )
    deciding_s = time.perf_counter() - started
    return {
        "workers": workers,
        "import_mb": size_mb,
        "import_rss_mb": import_rss_mb,
        "issues_per_s": (issues + decisions) / imported,
        "proposals": made,
        "proposals_per_s": sampled / proposing_s,
        "decisions_per_s": min(decisions, len(pending)) / max(deciding_s, 1e-9),
    }


def time_page(client: Any, url: str, repeat: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    timings: list[float] = []

    def get() -> int:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        if response.streaming:
            # Read as a browser would, a chunk at a time: joining them would measure our copy.
            return sum(len(chunk) for chunk in response.streaming_content)
        return len(response.content)

    # Memory is traced in a run of its own: tracing slows Python down several times.
    tracemalloc.start()
    with CaptureQueriesContext(connection) as captured:
        size = get()
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    queries = len(captured)
    slowest = max(captured.captured_queries, key=lambda q: float(q["time"]))["sql"]
    for _ in range(repeat):
        started = time.perf_counter()
        get()
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return {
        "slowest_sql": slowest,
        "p50_ms": round(statistics.median(timings), 1),
        "p95_ms": round(timings[min(len(timings) - 1, int(len(timings) * 0.95))], 1),
        "queries": queries,
        "bytes": size,
        "peak_mb": round(peak, 1),
    }


def _tree_rss_mb(pid: int) -> float:
    """The resident memory of a process and its children."""
    found = subprocess.run(
        ["ps", "-o", "rss=", "--pid", str(pid), "--ppid", str(pid)],
        capture_output=True,
        text=True,
        check=False,
    )
    return sum(int(value) for value in found.stdout.split()) / 1000


def time_workers(database_url: str, expected: int) -> dict[str, Any]:
    """Every issue proposed again by `celery worker --concurrency=$(nproc)` from the tasks the
    console enqueues: proposals a second and the workers' memory over the run."""
    from console.celery import app
    from triage.models import Issue, Proposal, Queue
    from triage.tasks import propose_later

    app.control.purge()
    Proposal.objects.all().delete()
    concurrency = os.cpu_count() or 1
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "console",
            "worker",
            "--pool=prefork",
            f"--concurrency={concurrency}",
            "-l",
            "warning",
            "-n",
            f"scale-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=os.environ | {"DATABASE_URL": database_url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(timeout=1) and time.monotonic() < deadline:
            time.sleep(0.5)
        ids = list(Issue.objects.order_by("pk").values_list("pk", flat=True))
        started = time.perf_counter()
        for queue in Queue.objects.all():
            propose_later(queue, ids)
        samples: list[float] = []
        count, grown_at = 0, 0.0
        # Done when the expected proposals are there (an estimate), or none came for 10 s
        # after the first; the first may take long on a busy machine.
        while count < expected:
            samples.append(_tree_rss_mb(worker.pid))
            time.sleep(1)
            now = Proposal.objects.count()
            if now > count:
                count, grown_at = now, time.perf_counter()
            waited = time.perf_counter() - (grown_at or started)
            if waited > (10 if grown_at else 600):
                break
        elapsed = max((grown_at or time.perf_counter()) - started, 1e-9)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
        app.control.purge()
    return {
        "concurrency": concurrency,
        "proposals_per_s": round(Proposal.objects.count() / elapsed),
        "rss_mb_first_last_peak": [
            round(samples[0]) if samples else 0,
            round(samples[-1]) if samples else 0,
            round(max(samples, default=0)),
        ],
    }


def time_recount(repeat: int) -> dict[str, Any]:
    """What a report page costs when its count is not cached: the 90-day pt2 report counted."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from triage import reports
    from triage.models import Queue

    queue = Queue.objects.get(slug="pt2")
    period = reports.Period.ending(datetime.now(UTC).date(), 90)
    timings: list[float] = []
    tracemalloc.start()
    with CaptureQueriesContext(connection) as captured:
        reports.recount(queue, period)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    for _ in range(repeat):
        started = time.perf_counter()
        reports.recount(queue, period)
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return {
        "p50_ms": round(statistics.median(timings), 1),
        "p95_ms": round(timings[min(len(timings) - 1, int(len(timings) * 0.95))], 1),
        "queries": len(captured),
        "bytes": 0,
        "peak_mb": round(peak, 1),
    }


def explain(sql: str) -> str:
    """The plan of a page's slowest query, in brief: its scans and its execution time."""
    from django.db import connection

    # A streamed export reads through a server-side cursor: explain the query it declares.
    declared = re.match(r"\s*DECLARE\s.*?\sCURSOR\s.*?\sFOR\s(.*)", sql, re.DOTALL | re.IGNORECASE)
    if declared:
        sql = declared.group(1)
    if not sql.lstrip().upper().startswith("SELECT"):
        return "(not a SELECT)"
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        (plan,) = cursor.fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)
    nodes: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        if "Scan" in node["Node Type"]:
            target = node.get("Index Name") or node.get("Relation Name", "")
            nodes.append(f"{node['Node Type']} {target}")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return f"{plan[0]['Execution Time']:.1f} ms: " + ", ".join(dict.fromkeys(nodes))


def time_sync(issues: int, seed: int) -> dict[str, float]:
    """A first sync of `issues` pt2 issues (most with comments) from the GitHub stand-in, then
    an unchanged poll: requests made, rate-limit units used, seconds."""
    from django.conf import settings

    from triage import sync
    from triage.models import Queue
    from triage.standins.github import GitHubStandIn

    rng = random.Random(seed)
    repository = "bench/sync"
    now = datetime.now(UTC)
    with GitHubStandIn() as server:
        server.add_repo(repository)
        for number in range(1, issues + 1):
            raw = raw_issue(number, rng)
            created = now - timedelta(days=20, minutes=-number)
            raw["created_at"] = raw["updated_at"] = created.isoformat()
            raw["labels"] = [{"name": "oncall: pt2"}]
            for comment in raw["comments"]:
                comment["created_at"] = created.isoformat()
            server.add_issue(repository, raw)
        settings.GITHUB_API_URL = server.url
        queue = Queue.objects.create(
            slug="bench-sync",
            name="bench",
            repository=repository,
            rubric="pt2",
            require_labels=["oncall: pt2"],
            exclude_labels=["triaged"],
            position=99,
        )
        server.reset_log()
        started = time.perf_counter()
        seen = sync.sync_queue(queue, on_changed=lambda issue: None)
        first_s = time.perf_counter() - started
        first = [r for r in server.requests if r.path != "/rate_limit"]
        # The next poll reads the newest issue again (GitHub's `since` includes it); the one
        # after finds nothing new and is answered 304, which costs no rate-limit unit.
        queue.refresh_from_db()
        sync.sync_queue(queue, on_changed=lambda issue: None)
        queue.refresh_from_db()
        server.reset_log()
        sync.sync_queue(queue, on_changed=lambda issue: None)
        second = [r for r in server.requests if r.path != "/rate_limit"]
        return {
            "issues": seen,
            "first_sync_requests": len(first),
            "first_sync_s": round(first_s, 1),
            "unchanged_poll_requests": len(second),
            "unchanged_poll_not_modified": server.not_modified,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--issues", type=int, default=10_000)
    parser.add_argument("--decisions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sync-issues", type=int, default=10_000)
    parser.add_argument(
        "--workers", action="store_true", help="also propose with real Celery workers (REDIS_URL)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the generated database for a later --reuse"
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="time the pages again on the database a --keep run left (migrated, not regenerated)",
    )
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse

    if connection.vendor != "postgresql":
        sys.exit("DATABASE_URL must name a PostgreSQL server.")
    setup_test_environment()
    settings.ALLOWED_HOSTS = ["testserver"]
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=args.reuse)
    try:
        db = settings.DATABASES["default"]
        database_url = (
            f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        )
        if args.workers and not settings.CELERY_BROKER_URL.startswith("redis"):
            sys.exit("--workers needs REDIS_URL: the workers take their tasks from Redis.")
        figures = (
            None
            if args.reuse
            else populate(
                args.issues, args.decisions, args.seed, database_url, with_workers=args.workers
            )
        )
        from triage.models import Decision, Issue, Proposal

        client = Client()
        client.login(username="bench", password="bench")
        pending_pt2 = Proposal.objects.filter(queue__slug="pt2", status="pending")
        # The cursor of the last page, or of the eleventh when there are more.
        depth = min(settings.TRIAGE_PAGE_SIZE * 10, pending_pt2.count() - 1)
        deep = pending_pt2.order_by("-issue_created_at", "-pk").values_list("pk", flat=True)[depth]
        proposal = Proposal.objects.filter(queue__slug="pt2", status="pending").first()
        decided = Decision.objects.order_by("-pk").first()
        assert proposal is not None and decided is not None
        issue = Issue.objects.get(pk=decided.proposal.issue_id)
        today = datetime.now(UTC).date()
        last_90 = f"start={(today - timedelta(days=89)).isoformat()}&end={today.isoformat()}"
        pages = {
            "inbox": reverse("inbox", args=["pt2"]),
            "inbox, a deep page": f"{reverse('inbox', args=['pt2'])}?cursor={deep}",
            "issue page": reverse("proposal", args=[proposal.pk]),
            "history": reverse("history", args=[issue.pk]),
            "report, 90 days": f"{reverse('report', args=['pt2'])}?{last_90}",
            "report CSV (labels)": f"{reverse('report', args=['pt2'])}?{last_90}&format=csv&table=labels",
            "drill-down (accepted)": f"{reverse('report-decisions', args=['pt2'])}?{last_90}&kind=accepted",
            "decisions.csv": reverse("export-decisions", args=["csv"]),
        }
        results = {page: time_page(client, url, args.repeat) for page, url in pages.items()}
        plans = {page: explain(result.pop("slowest_sql")) for page, result in results.items()}
        results["report, 90 days, counted afresh"] = time_recount(args.repeat)
        # A --keep run measured the sync; its queue is still there.
        synced = None if args.reuse else time_sync(args.sync_issues, args.seed)
    finally:
        if args.workers:
            from console.celery import app

            app.control.purge()  # the writes of the decisions: no GitHub to send them to
        if args.keep or args.reuse:
            print(f"kept the database {name} for --reuse")
        else:
            connection.creation.destroy_test_db(name, verbosity=0)

    if figures is not None:
        print(f"{args.issues} issues, {figures['proposals']} proposals, {args.decisions} decisions")
    print(f"{'page':28} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'bytes':>10} {'peak MB':>8}")
    for page, r in results.items():
        print(
            f"{page:28} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} {r['queries']:8d} "
            f"{r['bytes']:10d} {r['peak_mb']:8.1f}"
        )
    summary: dict[str, Any] = {"pages": results}
    if figures is not None:
        print(
            f"import_issues {figures['import_mb']:.0f} MB at {figures['issues_per_s']:.0f} "
            f"issues/s ({'proposals enqueued' if args.workers else 'proposing in-process'}) in "
            f"{figures['import_rss_mb']:.0f} MB RSS; proposing "
            f"{figures['proposals_per_s']:.0f} proposals/s in one process, deciding "
            f"{figures['decisions_per_s']:.0f} decisions/s"
        )
        if figures["workers"]:
            w = figures["workers"]
            print(
                f"celery worker --concurrency={w['concurrency']}: {w['proposals_per_s']} "
                f"proposals/s, RSS first/last/peak {w['rss_mb_first_last_peak']} MB"
            )
        summary |= {
            "import": {
                "issues_per_s": round(figures["issues_per_s"]),
                "peak_rss_mb": round(figures["import_rss_mb"]),
            },
            "workers": figures["workers"],
            "proposals_per_s": round(figures["proposals_per_s"]),
        }
    print("the slowest query of each page, by EXPLAIN ANALYZE:")
    for page, plan in plans.items():
        print(f"  {page:28} {plan}")
    if synced is not None:
        print(
            f"first sync of {synced['issues']} issues: {synced['first_sync_requests']} requests "
            f"in {synced['first_sync_s']} s; an unchanged poll: "
            f"{synced['unchanged_poll_requests']} request(s), "
            f"{synced['unchanged_poll_not_modified']} answered 304"
        )
        summary["sync"] = synced
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
