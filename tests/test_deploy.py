"""The deployed shape: the login throttle, the security headers, `check --deploy` on compose."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.urls import reverse

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fresh_throttle():
    keys = ["login-failures:user:admin", "login-failures:addr:127.0.0.1"]
    cache.delete_many(keys)
    yield
    cache.delete_many(keys)


@pytest.mark.django_db
def test_wrong_passwords_are_throttled_even_if_the_right_one_follows(client, fresh_throttle):
    get_user_model().objects.create_user("admin", password="the-right-one")
    for _ in range(30):
        response = client.post(reverse("login"), {"username": "admin", "password": "wrong"})
        assert response.status_code == 200

    response = client.post(reverse("login"), {"username": "admin", "password": "the-right-one"})

    assert response.status_code == 200
    assert "Too many wrong passwords" in response.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_a_right_password_within_the_allowance_logs_in(client, fresh_throttle):
    admin = get_user_model().objects.create_user("admin", password="the-right-one")
    for _ in range(3):
        client.post(reverse("login"), {"username": "admin", "password": "wrong"})
    response = client.post(reverse("login"), {"username": "admin", "password": "the-right-one"})
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(admin.pk)


@pytest.mark.django_db
def test_pages_carry_a_content_security_policy(client, oncall):
    client.force_login(oncall)
    policy = client.get(reverse("home"), follow=True)["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy


def compose_environment() -> dict[str, str]:
    """The web service's environment in docker-compose.yml, each `${VAR:-default}` at its default."""
    text = (ROOT / "docker-compose.yml").read_text()
    block = text.split("  environment: &env\n", 1)[1].split("\n  depends_on:", 1)[0]
    env: dict[str, str] = {}
    for line in block.splitlines():
        match = re.match(r"\s+([A-Z_]+): (.*)$", line)
        if match is None:
            continue
        name, value = match.groups()
        value = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)
        value = re.sub(r"\$\{\w+(?::\?[^}]*)?\}", "", value)
        env[name] = value
    return env


def test_check_deploy_with_the_compose_settings_prints_no_warning():
    env = compose_environment()
    assert env["TRUST_X_FORWARDED_PROTO"] == "1"
    # What compose leaves to the operator: a real key, and the database it can reach.
    env |= {
        "SECRET_KEY": "a-long-random-deployment-key-" + "x" * 40,
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "REDIS_URL": os.environ.get("REDIS_URL", ""),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={"PATH": os.environ.get("PATH", "")} | env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
