"""A small fault-injection run of the outbox in CI (benchmarks/faults.py runs the big one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from benchmarks import faults
from tests.factories import ensure_default_queues
from tests.test_worker import worker_database_url

pytestmark = pytest.mark.worker


@pytest.mark.django_db(transaction=True)
def test_writes_survive_injected_faults_exactly_once(settings, tmp_path: Path) -> None:
    if connection.vendor != "postgresql" or not str(django_settings.CELERY_BROKER_URL).startswith(
        "redis"
    ):
        pytest.skip("needs PostgreSQL and Redis (DATABASE_URL / REDIS_URL, as scripts/test sets)")
    ensure_default_queues()
    settings.TRIAGE_RESEND_AFTER_SECONDS = 3
    settings.TRIAGE_WRITE_LEASE_SECONDS = 15

    result = faults.run(
        30,
        12,
        seed=7,
        database_url=worker_database_url(),
        redis_restarts=False,
        log=tmp_path / "worker.log",
        settle_seconds=180,
    )

    assert result.faults >= 30, result.kinds
    assert (result.lost, result.duplicated, result.unreal_conflicts) == (0, 0, 0), result.details
    assert result.applied + result.conflicts >= 12
