from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings as django_settings

from console.celery import app as celery_app
from tests.factories import make_user
from triage.standins.github import GitHubStandIn

REPO = "pytorch/pytorch"


@pytest.fixture(autouse=True)
def tasks_in_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """Run Celery tasks in the test's process, except where a test starts a real worker."""
    if request.node.get_closest_marker("worker"):
        yield
        return
    celery_app.conf.task_always_eager = True
    celery_app.conf.task_eager_propagates = True
    yield
    celery_app.conf.task_always_eager = django_settings.CELERY_TASK_ALWAYS_EAGER
    celery_app.conf.task_eager_propagates = False


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: object) -> None:
    # PBKDF2's deliberate slowness is for attackers, not for a test that makes ten users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # type: ignore[attr-defined]


@pytest.fixture
def standin(settings: object) -> Iterator[GitHubStandIn]:
    """The GitHub stand-in, served over HTTP, with the app pointed at it."""
    with GitHubStandIn() as server:
        server.add_repo(REPO)
        settings.GITHUB_API_URL = server.url  # type: ignore[attr-defined]
        settings.GITHUB_SECONDS_BETWEEN_WRITES = 0  # type: ignore[attr-defined]
        yield server


@pytest.fixture
def oncall(db: None) -> object:
    return make_user("oncall", oncall=True)


@pytest.fixture
def viewer(db: None) -> object:
    return make_user("viewer", oncall=False)
