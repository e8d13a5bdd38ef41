from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache
from playwright.sync_api import ViewportSize, sync_playwright

from console.celery import app as celery_app
from tests.browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS
from tests.factories import make_user
from triage.standins.github import GitHubStandIn
from triage.tasks import cancel_pending_sends

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

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
def no_undo_window(settings: object) -> Iterator[None]:
    # Writes go at once in tests; the undo tests open the window themselves. A write a test
    # left waiting on a timer must not be sent into the next test.
    settings.TRIAGE_UNDO_SECONDS = 0  # type: ignore[attr-defined]
    yield
    cancel_pending_sends()


@pytest.fixture(autouse=True)
def reports_counted_at_once(settings: object) -> Iterator[None]:
    # A report shows what was decided before it was asked for; the caching tests set an age.
    settings.TRIAGE_REPORT_MAX_AGE_SECONDS = 0  # type: ignore[attr-defined]
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def similar_index_per_test(settings: object, tmp_path: Any) -> None:
    # Each test's similar-issue indexes in its own directory: an index names issue ids, and
    # another test's database has other issues under the same ids.
    settings.TRIAGE_SIMILAR_DIR = tmp_path / "similar"  # type: ignore[attr-defined]


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


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, once per module: Playwright cannot download a browser here."""
    # Playwright's sync API keeps an event loop on this thread, which makes Django refuse ORM
    # calls here; the tests' own ORM calls are synchronous all the same.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            yield chromium
            chromium.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


# Every browser test runs on a laptop's screen and on a phone's.
SCREENS = {
    "laptop": ViewportSize(width=1280, height=800),
    "phone": ViewportSize(width=390, height=844),
}


@pytest.fixture(params=list(SCREENS))
def page(request: pytest.FixtureRequest, browser: Browser, live_server: Any) -> Iterator[Page]:
    """A fresh tab on the live server; any JavaScript error on the page fails the test."""
    context = browser.new_context(base_url=live_server.url, viewport=SCREENS[request.param])
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


class BrokerDown:
    """Celery publishing to a Redis that is not there (nothing listens on port 9)."""

    KEYS = (
        "task_always_eager",
        "broker_url",
        "broker_connection_timeout",
        "broker_connection_retry",
        "task_publish_retry",
    )

    def __init__(self) -> None:
        self.saved = {key: celery_app.conf[key] for key in self.KEYS}
        celery_app.conf.update(
            task_always_eager=False,
            broker_url="redis://127.0.0.1:9/0",
            broker_connection_timeout=1,
            broker_connection_retry=False,
            task_publish_retry=False,
        )
        self._drop_connections()

    def restore(self) -> None:
        celery_app.conf.update(self.saved)
        self._drop_connections()

    @staticmethod
    def _drop_connections() -> None:
        # As Celery does after a fork: the next publish connects to the broker now configured.
        celery_app._pool = None  # type: ignore[attr-defined]
        amqp = celery_app.__dict__.get("amqp")
        if amqp is not None:
            amqp._producer_pool = None


@pytest.fixture
def broker_down() -> Iterator[BrokerDown]:
    down = BrokerDown()
    yield down
    down.restore()
