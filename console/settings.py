"""One settings module, driven by environment variables.

With no variables set it runs the embedded default: SQLite and Celery tasks executed
in-process, so that a new user sees the console with one command. `DATABASE_URL` and
`REDIS_URL` switch to PostgreSQL and real Celery workers on Redis.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

# Lets ModelAdmin[Model] and friends be subscripted at run time, as django-stubs types them.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false, yes/no), got {raw!r}")


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None


def env_url(name: str, default: str) -> str:
    raw = os.environ.get(name) or default
    if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", raw):
        raise ImproperlyConfigured(f"{name} must be an http(s) URL without query, got {raw!r}")
    return raw.rstrip("/")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return [part.strip() for part in raw.split(",") if part.strip()]


DEBUG = env_bool("DEBUG", default="DATABASE_URL" not in os.environ)
# The embedded default is a local demo: it may invent a key. A deployment must bring its own.
SECRET_KEY = os.environ.get("SECRET_KEY") or ""
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "insecure-embedded-default-key"

# Django's test runner adds "testserver" itself; it is no host to serve outside tests.
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
SITE_ROOT = env_str("SITE_ROOT", "http://127.0.0.1:8000")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.github",
    "triage",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "triage.context_processors.console",
            ],
        },
    }
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'triage-console.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# Behind a proxy that terminates TLS (set TRUST_X_FORWARDED_PROTO only when it overwrites the
# header): plain HTTP is redirected, and browsers are told to come back over HTTPS only.
BEHIND_TLS_PROXY = env_bool("TRUST_X_FORWARDED_PROTO", default=False)
if BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=BEHIND_TLS_PROXY)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if BEHIND_TLS_PROXY else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=False)
# Scripts and styles come from our own static files only; charts colour cells with style
# attributes, and nothing else is inline.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "style-src-attr": [CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "object-src": [CSP.NONE],
}
# Wrong passwords: this many per username (and per address) within the window, then refused.
LOGIN_FAILURES_ALLOWED = env_int("LOGIN_FAILURES_ALLOWED", 10)
LOGIN_FAILURE_WINDOW_SECONDS = env_int("LOGIN_FAILURE_WINDOW_SECONDS", 900)

# Celery. Without REDIS_URL tasks run in-process, right after the transaction commits.
REDIS_URL = os.environ.get("REDIS_URL", "")
# The cache holds what all web processes must share (login failures): Redis where there is one.
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULE = {
    "sync-all-queues": {
        "task": "triage.tasks.sync_all_queues",
        "schedule": env_float("TRIAGE_SYNC_INTERVAL_SECONDS", 300.0),
    },
    "collect-model-batches": {
        "task": "triage.tasks.collect_batches",
        "schedule": env_float("TRIAGE_BATCH_POLL_SECONDS", 60.0),
    },
    "resend-stale-writes": {"task": "triage.tasks.resend_stale_writes", "schedule": 60.0},
    "keep-reports-counted": {"task": "triage.tasks.keep_reports_counted", "schedule": 120.0},
    # Team membership is asked of GitHub at sign-in and by beat (daily), never inside a request.
    "recheck-github-teams": {
        "task": "triage.tasks.recheck_memberships",
        "schedule": env_float("TRIAGE_MEMBERSHIP_CHECK_SECONDS", 86_400.0),
    },
    "sync-all-histories": {
        "task": "triage.tasks.sync_all_histories",
        "schedule": env_float("TRIAGE_HISTORY_SYNC_SECONDS", 3600.0),
    },
    "rebuild-similar-indexes": {
        "task": "triage.tasks.rebuild_similar_indexes",
        "schedule": env_float("TRIAGE_SIMILAR_REBUILD_SECONDS", 6 * 3600.0),
    },
    # Queues proposing with rules+history learn from what closed and what was decided since.
    "train-models": {
        "task": "triage.tasks.train_models",
        "schedule": env_float("TRIAGE_TRAIN_INTERVAL_SECONDS", 86_400.0),
    },
}

# GitHub. GITHUB_API_URL points at GitHub Enterprise or at the local stand-in.
GITHUB_API_URL = env_url("GITHUB_API_URL", "https://api.github.com")
GITHUB_TOKEN = os.environ.get("GITHUB_TOKEN", "")
GITHUB_TIMEOUT_SECONDS = env_float("GITHUB_TIMEOUT_SECONDS", 15.0)
# The first wait after a 5xx or a timeout; each further attempt waits twice as long.
GITHUB_BACKOFF_SECONDS = env_float("GITHUB_BACKOFF_SECONDS", 5.0)
# PyGithub throttles writes to stay clear of GitHub's secondary rate limits.
GITHUB_SECONDS_BETWEEN_WRITES = env_float("GITHUB_SECONDS_BETWEEN_WRITES", 1.0)
GITHUB_DEFAULT_REPOSITORY = env_str("GITHUB_DEFAULT_REPOSITORY", "pytorch/pytorch")
# GitHub's webhook deliveries are signed with this secret; without it every delivery is refused.
GITHUB_WEBHOOK_SECRET = os.environ.get("GITHUB_WEBHOOK_SECRET", "")
GITHUB_WEBHOOK_MAX_BYTES = env_int("GITHUB_WEBHOOK_MAX_BYTES", 1_000_000)
# Only https:// URLs on this host become links: an issue's html_url comes from outside.
GITHUB_WEB_HOST = env_str("GITHUB_WEB_HOST", "github.com")
# Sign in with GitHub (OAuth app). Without a client id the login page offers passwords only.
# GITHUB_WEB_URL is where browsers are sent to authorize (GitHub Enterprise, or the stand-in).
GITHUB_WEB_URL = env_url("GITHUB_WEB_URL", f"https://{GITHUB_WEB_HOST}")
GITHUB_OAUTH_CLIENT_ID = os.environ.get("GITHUB_OAUTH_CLIENT_ID", "")
GITHUB_OAUTH_CLIENT_SECRET = os.environ.get("GITHUB_OAUTH_CLIENT_SECRET", "")
if bool(GITHUB_OAUTH_CLIENT_ID) != bool(GITHUB_OAUTH_CLIENT_SECRET):
    raise ImproperlyConfigured(
        "GITHUB_OAUTH_CLIENT_ID and GITHUB_OAUTH_CLIENT_SECRET are set together or not at all"
    )
# Only members of this organisation get in; its teams (set on each queue) decide.
GITHUB_ORG = env_str("GITHUB_ORG", "pytorch")
if not re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})", GITHUB_ORG):
    raise ImproperlyConfigured(
        f"GITHUB_ORG must be a GitHub organisation's login, got {GITHUB_ORG!r}"
    )
if GITHUB_OAUTH_CLIENT_ID:
    # "Sign in with GitHub" posts here and is redirected to GitHub: form-action covers redirects.
    SECURE_CSP["form-action"] = [CSP.SELF, GITHUB_WEB_URL]
SOCIALACCOUNT_ADAPTER = "triage.signin.adapter.SignInAdapter"
SOCIALACCOUNT_PROVIDERS: dict[str, dict[str, object]] = {
    "github": {
        # Reads GITHUB_WEB_URL and GITHUB_API_URL when it runs, not when it is imported.
        "provider_class": "triage.signin.provider.ConsoleGitHubProvider",
        # read:org lets the user's own token see their private organisation and team membership.
        "SCOPE": ["read:org"],
        "APPS": (
            [{"client_id": GITHUB_OAUTH_CLIENT_ID, "secret": GITHUB_OAUTH_CLIENT_SECRET}]
            if GITHUB_OAUTH_CLIENT_ID
            else []
        ),
    }
}
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_QUERY_EMAIL = False
SOCIALACCOUNT_STORE_TOKENS = False
SOCIALACCOUNT_LOGIN_ON_GET = False
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_LOGIN_METHODS = {"username"}
ACCOUNT_SIGNUP_FIELDS = ["username*"]
ACCOUNT_ADAPTER = "triage.signin.adapter.NoLocalSignupAdapter"
# How far back the first sync of a queue looks; later syncs are incremental.
TRIAGE_FIRST_SYNC_DAYS = env_int("TRIAGE_FIRST_SYNC_DAYS", 30)
TRIAGE_WRITE_MAX_ATTEMPTS = env_int("TRIAGE_WRITE_MAX_ATTEMPTS", 8)
# A worker holds a write this long at most (its claim's lease); a write still queued this long
# after it was due is sent again by beat.
TRIAGE_WRITE_LEASE_SECONDS = env_float("TRIAGE_WRITE_LEASE_SECONDS", 300.0)
TRIAGE_RESEND_AFTER_SECONDS = env_float("TRIAGE_RESEND_AFTER_SECONDS", 60.0)
# An approval's write waits this long before it is sent: the time to undo it.
TRIAGE_UNDO_SECONDS = env_float("TRIAGE_UNDO_SECONDS", 10.0)
# Rows per page of the inbox and of a report's drill-down: lists page by key, so a page costs
# the same at any depth.
# An oncall reads a screenful or two; 50 rows render in half the time of 100 (issue 12).
TRIAGE_PAGE_SIZE = env_int("TRIAGE_PAGE_SIZE", 50)
# How often an open inbox asks for its list again, to follow the others' decisions.
TRIAGE_INBOX_POLL_SECONDS = env_int("TRIAGE_INBOX_POLL_SECONDS", 15)
# A report is counted again in the background when decisions came since; until then, and for
# at most this long, the page shows the last count with its age.
TRIAGE_REPORT_MAX_AGE_SECONDS = env_int("TRIAGE_REPORT_MAX_AGE_SECONDS", 300)
TRIAGE_DEMO = env_bool("TRIAGE_DEMO", default=False)
# How far back a queue's first history sync reads closed issues; later ones are incremental.
TRIAGE_HISTORY_FIRST_DAYS = env_int("TRIAGE_HISTORY_FIRST_DAYS", 365)
# Where workers keep each repository's similar-issue index (triage.similar.index says why on
# disk); a worker that finds none there rebuilds it from the database.
TRIAGE_SIMILAR_DIR = Path(env_str("TRIAGE_SIMILAR_DIR", str(BASE_DIR / "var" / "similar")))
# From this cosine similarity an issue is marked "possible duplicate of" the earlier issue.
# Measured with `benchmarks/similar.py --corpus FILE --duplicates` (each issue re-filed with a
# third of its words dropped and a fifth replaced, the traceback kept): on the development set,
# written as near-variants of a few bugs, 0.65 marks 83% of re-filings and 1.0% of issues
# against a merely related one (0.6: 88% and 4.6%; 0.7: 79% and 0%); on the demo set, 94% and
# none. A mark only offers the duplicate comment; an oncall decides.
TRIAGE_DUPLICATE_SCORE = env_float("TRIAGE_DUPLICATE_SCORE", 0.65)
# Oncall weeks start on Monday in this time zone.
TRIAGE_ROTATION_TIME_ZONE = env_str("TRIAGE_ROTATION_TIME_ZONE", "UTC")

# The model proposer. The SDK's own ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL work as anywhere.
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL", "")
ANTHROPIC_MODEL = env_str("ANTHROPIC_MODEL", "claude-sonnet-4-6")
ANTHROPIC_MAX_TOKENS = env_int("ANTHROPIC_MAX_TOKENS", 1024)
ANTHROPIC_MAX_RETRIES = env_int("ANTHROPIC_MAX_RETRIES", 3)
ANTHROPIC_TIMEOUT_SECONDS = env_float("ANTHROPIC_TIMEOUT_SECONDS", 60.0)
# US dollars per million tokens. ANTHROPIC_PRICES (JSON, same shape) replaces the table.
ANTHROPIC_PRICES: dict[str, dict[str, float]] = {
    "claude-sonnet-4-6": {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.30},
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0, "cache_write": 1.25, "cache_read": 0.10},
    "claude-opus-4-6": {"input": 5.0, "output": 25.0, "cache_write": 6.25, "cache_read": 0.50},
}
if os.environ.get("ANTHROPIC_PRICES"):
    try:
        ANTHROPIC_PRICES = json.loads(os.environ["ANTHROPIC_PRICES"])
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"ANTHROPIC_PRICES is not valid JSON: {exc}") from None
# The Message Batches API costs half; backlogs of at least this many issues go through it.
ANTHROPIC_BATCH_DISCOUNT = env_float("ANTHROPIC_BATCH_DISCOUNT", 0.5)
TRIAGE_BATCH_THRESHOLD = env_int("TRIAGE_BATCH_THRESHOLD", 20)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # A line for every task that succeeds drowns what matters; a worker logs its own.
    "loggers": {"celery.app.trace": {"level": env_str("TASK_LOG_LEVEL", "WARNING")}},
}
