"""A local HTTP stand-in for the slice of GitHub's REST API that the console uses.

Tests and the demo point the real PyGithub client at it (``Github(base_url=standin.url)``) so
that every request crosses a real socket: pagination, URL quoting, status codes and rate-limit
headers are exercised exactly as they are against api.github.com, and faults (5xx, rate limits,
hangs) can be injected per route.

It also plays GitHub for "Sign in with GitHub": the OAuth authorize page (which signs in the
account set with ``sign_in_as`` and sends the browser back with a code), the token exchange,
``/user`` for the token's user, and organisation and team membership (``add_member``).

Run it on its own, without Django::

    python -m triage.standins.github --seed issues.jsonl --port 8765
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import hmac
import json
import queue
import re
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from email.message import Message
    from types import TracebackType

RATE_LIMIT = 5000
RATE_WINDOW_SECONDS = 3600
DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100
BOT_LOGIN = "triage-console-bot"
# Edits made through the Python API stand for a person clicking around on github.com.
HUMAN_LOGIN = "octocat"
DOCS_URL = "https://docs.github.com/rest"
WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
RECORDED_HEADERS = (
    "Authorization",
    "User-Agent",
    "Accept",
    "Content-Type",
    "X-GitHub-Api-Version",
    "If-None-Match",
)
EDITABLE_FIELDS = frozenset({"title", "body", "state", "state_reason", "labels", "assignees"})

FAULT_MESSAGES = {
    400: "Bad Request",
    401: "Bad credentials",
    403: "API rate limit exceeded for user ID 1.",
    404: "Not Found",
    409: "Conflict",
    410: "Issues are disabled for this repo",
    422: "Validation Failed",
    429: "API rate limit exceeded for user ID 1.",
    500: "Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class _ApiError(Exception):
    """Raised inside a route to answer with a GitHub-style error body."""

    def __init__(self, status: int, message: str | None = None, **extra: Any) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message or FAULT_MESSAGES.get(status, "Error")
        self.extra = extra


def _validation_failed(resource: str, field_name: str, code: str = "invalid") -> _ApiError:
    return _ApiError(
        422,
        "Validation Failed",
        errors=[{"resource": resource, "field": field_name, "code": code}],
    )


def _now() -> datetime:
    # GitHub timestamps have second resolution; keeping ours the same means a value the client
    # echoes back as `since` compares equal rather than a few microseconds early.
    return datetime.now(UTC).replace(microsecond=0)


def _parse_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        parsed = datetime.fromisoformat(value)
    else:
        raise ValueError(f"not a timestamp: {value!r}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).replace(microsecond=0)


def _format_time(value: datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _later(previous: datetime) -> datetime:
    # Seed data may carry timestamps in the future (or an edit may land in the same second as
    # the last one); an incremental `since` sync only notices a change if updated_at moves.
    now = _now()
    return now if now > previous else previous + timedelta(seconds=1)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # as sent, still percent-encoded, without the query string
    query: dict[str, str]
    json: Any
    headers: dict[str, str]

    @property
    def decoded_path(self) -> str:
        return unquote(self.path)


@dataclass
class _Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    times: int
    retry_after: int | None
    rate_limit_reset: int | None
    delay: float
    body: dict[str, Any] | None

    def matches(self, method: str, path: str) -> bool:
        return (self.method in ("*", method)) and self.pattern.search(path) is not None


@dataclass(frozen=True)
class _Call:
    base: str  # scheme://host[:port] the client addressed, for building URLs in bodies
    args: dict[str, str]  # named groups from the route pattern, still percent-encoded
    query: dict[str, str]
    body: Any
    token: str = ""  # the request's token, without its "token "/"Bearer " prefix


@dataclass
class _Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Label:
    id: int
    name: str
    color: str = "ededed"
    description: str | None = None
    default: bool = False


@dataclass
class _Comment:
    id: int
    user: str
    body: str
    created_at: datetime
    updated_at: datetime
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Issue:
    number: int
    id: int
    title: str
    body: str | None
    state: str
    state_reason: str | None
    labels: list[str]  # label keys (lower-cased names) into the repository's catalogue
    user: str
    assignees: list[str]
    locked: bool
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None
    closed_by: str | None
    comment_count: int
    comments: list[_Comment]
    html_url: str | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Repo:
    id: int
    full_name: str
    issues: dict[int, _Issue] = field(default_factory=dict)
    labels: dict[str, _Label] = field(default_factory=dict)  # keyed by lower-cased name

    @property
    def owner(self) -> str:
        return self.full_name.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.full_name.split("/", 1)[1]


# Keys that the stand-in derives itself; a seed line's copies of them (pointing at
# api.github.com) are dropped rather than passed through.
_DERIVED_ISSUE_KEYS = frozenset(
    {
        "url",
        "repository_url",
        "labels_url",
        "comments_url",
        "events_url",
        "timeline_url",
        "html_url",
        "id",
        "node_id",
        "number",
        "title",
        "body",
        "state",
        "state_reason",
        "labels",
        "user",
        "assignee",
        "assignees",
        "locked",
        "created_at",
        "updated_at",
        "closed_at",
        "closed_by",
        "comments",
        "repository",
    }
)
_DERIVED_COMMENT_KEYS = frozenset(
    {"id", "node_id", "url", "html_url", "issue_url", "user", "body", "created_at", "updated_at"}
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Lets a quickly restarted demo rebind the same port.
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], standin: GitHubStandIn) -> None:
        super().__init__(address, _Handler)
        self.standin = standin


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps PyGithub's pooled connection alive across requests, as GitHub does.
    protocol_version = "HTTP/1.1"
    # Headers and body go out as separate writes; with Nagle on, the client's delayed ACK
    # stalls every response by ~40 ms.
    disable_nagle_algorithm = True
    server_version = "GitHubStandIn/1.0"

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: Any) -> None:
        # Access logs would drown test output; `GitHubStandIn.requests` is the log.
        pass

    def _handle(self) -> None:
        server = self.server
        assert isinstance(server, _Server)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        reply = server.standin._dispatch(self.command, self.path, raw, self.headers)
        if reply is None:
            # The stand-in is shutting down mid-hang: drop the connection like a dead upstream.
            self.close_connection = True
            return
        payload = b"" if reply.body is None else json.dumps(reply.body).encode()
        try:
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            # A client that timed out during an injected delay has already gone away.
            self.close_connection = True


class GitHubStandIn:
    """Serves GitHub-shaped JSON for issues, labels and comments from in-memory state."""

    bot_login: str = BOT_LOGIN

    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        self._token = token
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._repos: dict[str, _Repo] = {}  # keyed by lower-cased full name, as GitHub matches
        self._users: dict[str, dict[str, Any]] = {}
        self._faults: list[_Fault] = []
        self._next_id = 1_000_001
        self._rate_remaining = RATE_LIMIT
        self._rate_reset = int(time.time()) + RATE_WINDOW_SECONDS
        self.requests: list[RecordedRequest] = []
        # Where to send signed webhook deliveries when an issue changes (None: nowhere).
        self.webhook_url: str | None = None
        self.webhook_secret = ""
        self.deliveries: list[dict[str, Any]] = []
        # GETs answered 304 Not Modified (a conditional request that found nothing new).
        self.not_modified = 0
        # Injected faults that a request actually met.
        self.faults_fired = 0
        # Sign in with GitHub: the OAuth app, the account the authorize page signs in (as if
        # the person at the browser had), codes and tokens handed out, and who is in which
        # organisation and team (lower-cased, as GitHub matches them).
        self.oauth_client_id = "standin-client"
        self.oauth_client_secret = "standin-secret"
        self.signed_in: str | None = None
        self._codes: dict[str, tuple[str, str]] = {}
        self._user_tokens: dict[str, str] = {}
        self._org_members: dict[str, set[str]] = {}
        self._team_members: dict[str, set[str]] = {}
        self._outgoing: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self._sender: threading.Thread | None = None
        repo = r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
        issue = repo + r"/issues/(?P<number>\d+)"
        self._route_table: list[tuple[str, re.Pattern[str], Callable[[_Call], _Reply]]] = [
            (method, re.compile(pattern), handler)
            for method, pattern, handler in (
                ("GET", r"/rate_limit", self._get_rate_limit),
                ("GET", r"/user", self._get_user),
                ("GET", r"/login/oauth/authorize", self._oauth_authorize),
                ("POST", r"/login/oauth/access_token", self._oauth_access_token),
                ("GET", r"/orgs/(?P<org>[^/]+)/members/(?P<login>[^/]+)", self._org_member),
                (
                    "GET",
                    r"/orgs/(?P<org>[^/]+)/teams/(?P<team>[^/]+)/memberships/(?P<login>[^/]+)",
                    self._team_membership,
                ),
                ("GET", repo, self._get_repo),
                ("GET", repo + r"/issues", self._list_issues),
                ("GET", repo + r"/issues/comments", self._list_repository_comments),
                ("GET", issue, self._get_issue),
                ("PATCH", issue, self._patch_issue),
                ("GET", issue + r"/comments", self._list_comments),
                ("POST", issue + r"/comments", self._post_comment),
                ("GET", issue + r"/labels", self._get_labels),
                ("POST", issue + r"/labels", self._add_labels),
                ("PUT", issue + r"/labels", self._replace_labels),
                ("DELETE", issue + r"/labels", self._clear_labels),
                # PyGithub quotes with `/` left safe, so a label name may span path segments.
                ("DELETE", issue + r"/labels/(?P<name>.+)", self._remove_label),
            )
        ]
        # Binding here rather than in start() makes `url` usable as soon as the object exists.
        self._server = _Server((host, port), self)
        bound_host, bound_port = self._server.server_address[:2]
        advertised = str(bound_host) if bound_host not in ("0.0.0.0", "") else "127.0.0.1"
        self._url = f"http://{advertised}:{bound_port}"

    @property
    def url(self) -> str:
        return self._url

    def start(self) -> GitHubStandIn:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                # The default half-second poll would make every stop() (test teardown) slow.
                kwargs={"poll_interval": 0.05},
                name="github-standin",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._sender is not None:
            self._outgoing.put(None)
            self._sender.join(timeout=5)
            self._sender = None
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> GitHubStandIn:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ----------------------------------------------------------------- sign in and membership

    def sign_in_as(self, login: str | None) -> None:
        """The account GitHub's authorize page signs in from now on (None: the user declines)."""
        with self._lock:
            if login is not None:
                self._remember_user(login)
            self.signed_in = login

    def add_member(self, org: str, login: str, teams: Iterable[str] = ()) -> None:
        """Make `login` a member of `org` and of its teams named by slug."""
        with self._lock:
            self._remember_user(login)
            self._org_members.setdefault(org.lower(), set()).add(login.lower())
            for slug in teams:
                self._team_members.setdefault(f"{org}/{slug}".lower(), set()).add(login.lower())

    def remove_member(self, org: str, login: str) -> None:
        with self._lock:
            self._org_members.get(org.lower(), set()).discard(login.lower())
            for team, members in self._team_members.items():
                if team.startswith(f"{org.lower()}/"):
                    members.discard(login.lower())

    def remove_from_team(self, org: str, slug: str, login: str) -> None:
        with self._lock:
            self._team_members.get(f"{org}/{slug}".lower(), set()).discard(login.lower())

    # ----------------------------------------------------------------- webhooks

    def send_webhooks(self, url: str, secret: str) -> None:
        """From now on, POST a signed delivery to `url` whenever an issue changes, as GitHub
        does for a repository webhook with the `issues` and `issue_comment` events."""
        self.webhook_url, self.webhook_secret = url, secret
        if self._sender is None:
            self._sender = threading.Thread(
                target=self._send_deliveries, name="github-standin-webhooks", daemon=True
            )
            self._sender.start()

    def _notify(self, event: str, action: str, repo: _Repo, issue: _Issue, **extra: Any) -> None:
        if self.webhook_url is None:
            return
        payload = {
            "action": action,
            "issue": self._render_issue(self._url, repo, issue),
            "repository": {"id": repo.id, "full_name": repo.full_name},
            "sender": {"login": extra.pop("actor", HUMAN_LOGIN)},
            **extra,
        }
        self._outgoing.put((event, payload))

    def _send_deliveries(self) -> None:
        while (item := self._outgoing.get()) is not None:
            event, payload = item
            body = json.dumps(payload).encode()
            signature = hmac.new(self.webhook_secret.encode(), body, hashlib.sha256).hexdigest()
            delivery = str(uuid.uuid4())
            request = urllib.request.Request(
                str(self.webhook_url),
                data=body,
                method="POST",
                headers={
                    "Content-Type": "application/json",
                    "User-Agent": "GitHub-Hookshot/standin",
                    "X-GitHub-Event": event,
                    "X-GitHub-Delivery": delivery,
                    "X-Hub-Signature-256": f"sha256={signature}",
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    status = response.status
            except urllib.error.HTTPError as error:
                status = error.code
            except OSError:
                status = 0
            with self._lock:
                self.deliveries.append({"event": event, "id": delivery, "status": status})

    # ----------------------------------------------------------------- seeding and inspection

    def add_repo(self, repo: str) -> None:
        with self._lock:
            self._repo_for_write(repo)

    def add_issue(self, repo: str, issue: dict[str, Any]) -> None:
        with self._lock:
            target = self._repo_for_write(repo)
            number = int(issue.get("number") or max(target.issues, default=0) + 1)
            created = _parse_time(issue["created_at"]) if issue.get("created_at") else _now()
            updated = _parse_time(issue["updated_at"]) if issue.get("updated_at") else created
            closed = _parse_time(issue["closed_at"]) if issue.get("closed_at") else None
            state = str(issue.get("state") or "open")
            raw_comments = issue.get("comments")
            comments = (
                [self._seed_comment(c, created) for c in raw_comments]
                if isinstance(raw_comments, list)
                else []
            )
            count = int(raw_comments) if isinstance(raw_comments, int) else len(comments)
            closed_by = issue.get("closed_by")
            target.issues[number] = _Issue(
                number=number,
                id=int(issue.get("id") or self._allocate_id()),
                title=str(issue.get("title") or f"Issue {number}"),
                body=issue.get("body"),
                state=state,
                state_reason=issue.get("state_reason"),
                labels=self._label_keys(target, issue.get("labels") or []),
                user=self._remember_user(issue.get("user") or "ghost"),
                assignees=[self._remember_user(a) for a in issue.get("assignees") or []],
                locked=bool(issue.get("locked", False)),
                created_at=created,
                updated_at=updated,
                closed_at=closed if closed or state != "closed" else updated,
                closed_by=self._remember_user(closed_by) if closed_by else None,
                comment_count=count,
                comments=comments,
                html_url=issue.get("html_url"),
                extra={k: v for k, v in issue.items() if k not in _DERIVED_ISSUE_KEYS},
            )

    def load_jsonl(self, repo: str, path: str | Path) -> int:
        count = 0
        with Path(path).open(encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    self.add_issue(repo, json.loads(line))
                    count += 1
        return count

    def issue(self, repo: str, number: int) -> dict[str, Any]:
        with self._lock:
            target = self._repo_for_read(repo)
            found = self._issue_for_read(target, number)
            rendered = self._render_issue(self._url, target, found)
            rendered["label_names"] = [target.labels[key].name for key in found.labels]
            # Seeded extras may nest; the caller must not be able to reach into our state.
            return copy.deepcopy(rendered)

    def label_names(self, repo: str, number: int) -> list[str]:
        with self._lock:
            target = self._repo_for_read(repo)
            found = self._issue_for_read(target, number)
            return [target.labels[key].name for key in found.labels]

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        with self._lock:
            target = self._repo_for_read(repo)
            found = self._issue_for_read(target, number)
            rendered = [self._render_comment(self._url, target, found, c) for c in found.comments]
            return copy.deepcopy(rendered)

    def add_comment(self, repo: str, number: int, body: str, user: str = HUMAN_LOGIN) -> None:
        """Someone other than the console comments on github.com."""
        with self._lock:
            target = self._repo_for_read(repo)
            found = self._issue_for_read(target, number)
            now = _later(found.updated_at)
            found.comments.append(
                self._seed_comment({"body": body, "user": user, "created_at": now.isoformat()}, now)
            )
            found.comment_count = len(found.comments)
            found.updated_at = now
            self._notify("issue_comment", "created", target, found, actor=user)

    def set_labels(self, repo: str, number: int, labels: list[str]) -> None:
        self.edit_issue(repo, number, labels=labels)

    def edit_issue(self, repo: str, number: int, **fields: Any) -> None:
        unknown = set(fields) - EDITABLE_FIELDS
        if unknown:
            raise ValueError(f"cannot edit {sorted(unknown)}; editable: {sorted(EDITABLE_FIELDS)}")
        with self._lock:
            target = self._repo_for_read(repo)
            found = self._issue_for_read(target, number)
            try:
                self._apply_edit(target, found, fields, actor=HUMAN_LOGIN)
            except _ApiError as error:
                raise ValueError(f"invalid edit of {repo}#{number}: {error.extra}") from None

    def inject(
        self,
        method: str,
        path_regex: str,
        status: int,
        *,
        times: int = 1,
        retry_after: int | None = None,
        rate_limit_reset: int | None = None,
        delay: float = 0.0,
        body: dict[str, Any] | None = None,
    ) -> None:
        if status == 0 and delay <= 0:
            raise ValueError("status 0 only makes sense with a delay")
        with self._lock:
            self._faults.append(
                _Fault(
                    method=method.upper(),
                    pattern=re.compile(path_regex),
                    status=status,
                    times=times,
                    retry_after=retry_after,
                    rate_limit_reset=rate_limit_reset,
                    delay=delay,
                    body=body,
                )
            )

    def writes(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.method in WRITE_METHODS]

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()

    # ----------------------------------------------------------------------- request handling

    def _dispatch(
        self, method: str, target: str, raw: bytes, headers: Message[str, str]
    ) -> _Reply | None:
        split = urlsplit(target)
        path = split.path
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        host = headers.get("Host")
        # Links are built from the Host the client used, so a worker in another container that
        # reaches us by a different name gets URLs it can follow.
        base = f"http://{host}" if host else self._url
        body: Any = None
        bad_json = False
        if raw and (headers.get("Content-Type") or "").startswith(
            "application/x-www-form-urlencoded"
        ):
            # OAuth's token exchange posts a form, not JSON.
            body = dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
        elif raw:
            try:
                body = json.loads(raw)
            except ValueError:
                bad_json = True
        authorization = headers.get("Authorization") or ""
        token = authorization.partition(" ")[2].strip()
        with self._lock:
            self.requests.append(
                RecordedRequest(
                    method=method,
                    path=path,
                    query=query,
                    json=body,
                    headers={h: headers[h] for h in RECORDED_HEADERS if headers.get(h) is not None},
                )
            )
            fault = self._take_fault(method, path)
        if fault is not None and fault.delay > 0 and self._stopping.wait(fault.delay):
            return None
        with self._lock:
            # As on GitHub, asking about the limit is free, and so is a 304 (below).
            counts = path != "/rate_limit"
            if counts:
                self._spend_rate_limit()
            if fault is not None and fault.status:
                reply = self._fault_reply(fault)
            elif (
                self._token is not None
                and not path.startswith("/login/oauth/")
                and token != self._token
                and token not in self._user_tokens
            ):
                reply = _Reply(401, {"message": "Bad credentials", "documentation_url": DOCS_URL})
            elif bad_json:
                reply = _Reply(400, {"message": "Problems parsing JSON"})
            else:
                try:
                    reply = self._route(method, path, _Call(base, {}, query, body, token))
                except _ApiError as error:
                    reply = _Reply(
                        error.status,
                        {"message": error.message, "documentation_url": DOCS_URL, **error.extra},
                    )
                except Exception as error:
                    # A malformed request must still get an answer; a dropped connection would
                    # look like a network fault and send the client's retry logic astray.
                    traceback.print_exc()
                    reply = _Reply(500, {"message": f"Stand-in error: {error!r}"})
            if method == "GET" and reply.status == 200:
                etag = (
                    '"'
                    + hashlib.sha1(json.dumps(reply.body, sort_keys=True).encode()).hexdigest()
                    + '"'
                )
                reply.headers["ETag"] = etag
                if headers.get("If-None-Match") == etag:
                    # Unchanged: no body, and GitHub does not count it against the rate limit.
                    self.not_modified += 1
                    if counts:
                        self._rate_remaining = min(self._rate_remaining + 1, RATE_LIMIT)
                    reply = _Reply(304, None, {"ETag": etag})
            return self._finish(reply)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        for fault in self._faults:
            if fault.matches(method, path):
                self.faults_fired += 1
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _spend_rate_limit(self) -> None:
        now = int(time.time())
        if now >= self._rate_reset:
            self._rate_remaining = RATE_LIMIT
            self._rate_reset = now + RATE_WINDOW_SECONDS
        self._rate_remaining = max(self._rate_remaining - 1, 0)

    def _fault_reply(self, fault: _Fault) -> _Reply:
        body = fault.body or {
            "message": FAULT_MESSAGES.get(fault.status, "Error"),
            "documentation_url": DOCS_URL,
        }
        headers: dict[str, str] = {}
        if fault.status in (403, 429):
            if fault.retry_after is not None:
                headers["Retry-After"] = str(fault.retry_after)
            if fault.rate_limit_reset is not None:
                headers["X-RateLimit-Remaining"] = "0"
                headers["X-RateLimit-Used"] = str(RATE_LIMIT)
                headers["X-RateLimit-Reset"] = str(fault.rate_limit_reset)
        return _Reply(fault.status, body, headers)

    def _finish(self, reply: _Reply) -> _Reply:
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "X-GitHub-Media-Type": "github.v3; format=json",
            "X-RateLimit-Limit": str(RATE_LIMIT),
            "X-RateLimit-Remaining": str(self._rate_remaining),
            "X-RateLimit-Used": str(RATE_LIMIT - self._rate_remaining),
            "X-RateLimit-Reset": str(self._rate_reset),
            "X-RateLimit-Resource": "core",
        }
        # Fault-specific values (e.g. Remaining: 0) win over the running counters.
        headers.update(reply.headers)
        return _Reply(reply.status, reply.body, headers)

    def _route(self, method: str, path: str, call: _Call) -> _Reply:
        for route_method, pattern, handler in self._route_table:
            match = pattern.fullmatch(path)
            if match and route_method == method:
                return handler(
                    _Call(call.base, match.groupdict(), call.query, call.body, call.token)
                )
        raise _ApiError(404)

    def _get_rate_limit(self, call: _Call) -> _Reply:
        core = {
            "limit": RATE_LIMIT,
            "remaining": self._rate_remaining,
            "reset": self._rate_reset,
            "used": RATE_LIMIT - self._rate_remaining,
            "resource": "core",
        }
        idle = {"remaining": 5000, "limit": 5000, "reset": self._rate_reset, "used": 0}
        return _Reply(
            200,
            {
                "resources": {
                    "core": core,
                    "search": {**idle, "limit": 30, "remaining": 30, "resource": "search"},
                    "graphql": {**idle, "resource": "graphql"},
                },
                "rate": core,
            },
        )

    def _get_user(self, call: _Call) -> _Reply:
        # A token handed out by the OAuth flow is its user's; any other is the console's bot.
        login = self._user_tokens.get(call.token, self.bot_login)
        return _Reply(200, self._render_user(call.base, self._remember_user(login)))

    def _oauth_authorize(self, call: _Call) -> _Reply:
        """GitHub's authorize page, with the person at the browser already agreeing: straight
        back to the app with a code (or with access_denied when nobody is signed in)."""
        if call.query.get("client_id") != self.oauth_client_id:
            raise _ApiError(404)
        target = call.query.get("redirect_uri", "")
        if not target.startswith(("http://", "https://")):
            raise _ApiError(422, "The redirect_uri is not an http(s) URL.")
        answer = {"state": call.query.get("state", "")}
        if self.signed_in is None:
            answer["error"] = "access_denied"
        else:
            code = uuid.uuid4().hex
            self._codes[code] = (self.signed_in, target)
            answer["code"] = code
        separator = "&" if "?" in target else "?"
        return _Reply(302, None, {"Location": f"{target}{separator}{urlencode(answer)}"})

    def _oauth_access_token(self, call: _Call) -> _Reply:
        form = call.body if isinstance(call.body, dict) else {}
        if (
            form.get("client_id") != self.oauth_client_id
            or form.get("client_secret") != self.oauth_client_secret
        ):
            return _Reply(200, {"error": "incorrect_client_credentials"})
        # A code is good once, and only for the redirect it was issued for.
        issued = self._codes.pop(str(form.get("code", "")), None)
        if issued is None or form.get("redirect_uri", issued[1]) != issued[1]:
            return _Reply(200, {"error": "bad_verification_code"})
        token = "gho_" + uuid.uuid4().hex
        self._user_tokens[token] = issued[0]
        # GitHub answers a form unless asked for JSON; allauth reads either.
        return _Reply(200, {"access_token": token, "token_type": "bearer", "scope": "read:org"})

    def _org_member(self, call: _Call) -> _Reply:
        org, login = unquote(call.args["org"]).lower(), unquote(call.args["login"]).lower()
        if login in self._org_members.get(org, set()):
            return _Reply(204)
        raise _ApiError(404)

    def _team_membership(self, call: _Call) -> _Reply:
        org, slug = unquote(call.args["org"]).lower(), unquote(call.args["team"]).lower()
        login = unquote(call.args["login"])
        if login.lower() not in self._team_members.get(f"{org}/{slug}", set()):
            raise _ApiError(404)
        url = f"{call.base}/organizations/{org}/team/{slug}/memberships/{quote(login)}"
        return _Reply(200, {"url": url, "role": "member", "state": "active"})

    def _get_repo(self, call: _Call) -> _Reply:
        target = self._repo_from_args(call.args)
        api = f"{call.base}/repos/{target.full_name}"
        open_count = sum(1 for i in target.issues.values() if i.state == "open")
        return _Reply(
            200,
            {
                "id": target.id,
                "node_id": f"R_{target.id}",
                "name": target.name,
                "full_name": target.full_name,
                "owner": {**self._render_user(call.base, target.owner), "type": "Organization"},
                "private": False,
                "visibility": "public",
                "fork": False,
                "archived": False,
                "disabled": False,
                "has_issues": True,
                "description": None,
                "default_branch": "main",
                "open_issues_count": open_count,
                "html_url": f"https://github.com/{target.full_name}",
                "url": api,
                "issues_url": api + "/issues{/number}",
                "labels_url": api + "/labels{/name}",
                "comments_url": api + "/comments{/number}",
                "issue_comment_url": api + "/issues/comments{/number}",
                "events_url": api + "/events",
            },
        )

    def _list_issues(self, call: _Call) -> _Reply:
        target = self._repo_from_args(call.args)
        state = call.query.get("state", "open")
        if state not in ("open", "closed", "all"):
            raise _validation_failed("Issue", "state")
        wanted = {name.strip().lower() for name in call.query.get("labels", "").split(",")} - {""}
        since = self._since(call.query)
        sort = call.query.get("sort", "created")
        sort_keys: dict[str, Callable[[_Issue], Any]] = {
            "created": lambda i: (i.created_at, i.number),
            "updated": lambda i: (i.updated_at, i.number),
            "comments": lambda i: (i.comment_count, i.number),
        }
        if sort not in sort_keys:
            raise _validation_failed("Issue", "sort")
        matching = [
            i
            for i in target.issues.values()
            if (state == "all" or i.state == state)
            and wanted <= set(i.labels)
            and (since is None or i.updated_at >= since)
        ]
        matching.sort(key=sort_keys[sort], reverse=self._descending(call.query))
        page, links = self._paginate(
            call.base, f"/repos/{target.full_name}/issues", call.query, matching
        )
        return _Reply(200, [self._render_issue(call.base, target, i) for i in page], links)

    def _get_issue(self, call: _Call) -> _Reply:
        target, found = self._issue_from_args(call.args)
        return _Reply(200, self._render_issue(call.base, target, found))

    def _patch_issue(self, call: _Call) -> _Reply:
        target, found = self._issue_from_args(call.args)
        if not isinstance(call.body, dict):
            raise _validation_failed("Issue", "body")
        # Milestones and the like are accepted and ignored: the console never sets them.
        fields = {k: v for k, v in call.body.items() if k in EDITABLE_FIELDS}
        self._apply_edit(target, found, fields, actor=self.bot_login)
        return _Reply(200, self._render_issue(call.base, target, found))

    def _list_comments(self, call: _Call) -> _Reply:
        target, found = self._issue_from_args(call.args)
        since = self._since(call.query)
        matching = [c for c in found.comments if since is None or c.updated_at >= since]
        path = f"/repos/{target.full_name}/issues/{found.number}/comments"
        page, links = self._paginate(call.base, path, call.query, matching)
        return _Reply(200, [self._render_comment(call.base, target, found, c) for c in page], links)

    def _list_repository_comments(self, call: _Call) -> _Reply:
        target = self._repo_from_args(call.args)
        since = self._since(call.query)
        sort = call.query.get("sort", "created")
        if sort not in ("created", "updated"):
            raise _validation_failed("IssueComment", "sort")
        matching = [
            (issue, comment)
            for issue in target.issues.values()
            for comment in issue.comments
            if since is None or comment.updated_at >= since
        ]
        matching.sort(
            key=lambda pair: (getattr(pair[1], f"{sort}_at"), pair[1].id),
            reverse=self._descending(call.query),
        )
        path = f"/repos/{target.full_name}/issues/comments"
        page, links = self._paginate(call.base, path, call.query, matching)
        rendered = [self._render_comment(call.base, target, i, c) for i, c in page]
        return _Reply(200, rendered, links)

    def _post_comment(self, call: _Call) -> _Reply:
        target, found = self._issue_from_args(call.args)
        text = call.body.get("body") if isinstance(call.body, dict) else None
        if not isinstance(text, str) or not text:
            raise _validation_failed("IssueComment", "body", "missing_field")
        now = _later(found.updated_at)
        comment = _Comment(
            id=self._allocate_id(),
            user=self._remember_user(self.bot_login),
            body=text,
            created_at=now,
            updated_at=now,
        )
        found.comments.append(comment)
        found.comment_count += 1
        found.updated_at = now
        self._notify("issue_comment", "created", target, found, actor=self.bot_login)
        return _Reply(201, self._render_comment(call.base, target, found, comment))

    def _get_labels(self, call: _Call) -> _Reply:
        target, found = self._issue_from_args(call.args)
        return _Reply(200, self._render_labels(call.base, target, found))

    def _add_labels(self, call: _Call) -> _Reply:
        target, found = self._issue_from_args(call.args)
        added = self._label_keys(target, self._labels_from_body(call.body))
        self._set_issue_labels(found, found.labels + [k for k in added if k not in found.labels])
        return _Reply(200, self._render_labels(call.base, target, found))

    def _replace_labels(self, call: _Call) -> _Reply:
        target, found = self._issue_from_args(call.args)
        self._set_issue_labels(found, self._label_keys(target, self._labels_from_body(call.body)))
        return _Reply(200, self._render_labels(call.base, target, found))

    def _clear_labels(self, call: _Call) -> _Reply:
        _, found = self._issue_from_args(call.args)
        self._set_issue_labels(found, [])
        return _Reply(204)

    def _remove_label(self, call: _Call) -> _Reply:
        target, found = self._issue_from_args(call.args)
        key = unquote(call.args["name"]).lower()
        if key not in found.labels:
            raise _ApiError(404, "Label does not exist")
        self._set_issue_labels(found, [k for k in found.labels if k != key])
        return _Reply(200, self._render_labels(call.base, target, found))

    # --------------------------------------------------------------------------- state helpers

    def _allocate_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _repo_for_write(self, repo: str) -> _Repo:
        if repo.count("/") != 1:
            raise ValueError(f"repository must be 'owner/name', got {repo!r}")
        key = repo.lower()
        if key not in self._repos:
            self._repos[key] = _Repo(id=self._allocate_id(), full_name=repo)
        return self._repos[key]

    def _repo_for_read(self, repo: str) -> _Repo:
        try:
            return self._repos[repo.lower()]
        except KeyError:
            raise KeyError(f"no repository {repo!r} in the stand-in") from None

    def _issue_for_read(self, repo: _Repo, number: int) -> _Issue:
        try:
            return repo.issues[number]
        except KeyError:
            raise KeyError(f"no issue {repo.full_name}#{number} in the stand-in") from None

    def _repo_from_args(self, args: dict[str, str]) -> _Repo:
        found = self._repos.get(f"{unquote(args['owner'])}/{unquote(args['repo'])}".lower())
        if found is None:
            raise _ApiError(404)
        return found

    def _issue_from_args(self, args: dict[str, str]) -> tuple[_Repo, _Issue]:
        repo = self._repo_from_args(args)
        found = repo.issues.get(int(args["number"]))
        if found is None:
            raise _ApiError(404)
        return repo, found

    def _remember_user(self, user: Any) -> str:
        data = {"login": user} if isinstance(user, str) else dict(user)
        login = str(data["login"])
        if login not in self._users:
            self._users[login] = {
                "login": login,
                "id": int(data.get("id") or self._allocate_id()),
                "type": data.get("type", "User"),
                "site_admin": bool(data.get("site_admin", False)),
            }
        return login

    def _seed_comment(self, raw: dict[str, Any], fallback_time: datetime) -> _Comment:
        created = _parse_time(raw["created_at"]) if raw.get("created_at") else fallback_time
        comment_id = int(raw.get("id") or self._allocate_id())
        # Later comments posted by the client must not collide with seeded ids.
        self._next_id = max(self._next_id, comment_id)
        return _Comment(
            id=comment_id,
            user=self._remember_user(raw.get("user") or "ghost"),
            body=str(raw.get("body") or ""),
            created_at=created,
            updated_at=_parse_time(raw["updated_at"]) if raw.get("updated_at") else created,
            extra={k: v for k, v in raw.items() if k not in _DERIVED_COMMENT_KEYS},
        )

    def _label_keys(self, repo: _Repo, labels: Iterable[Any]) -> list[str]:
        # GitHub label names are case-insensitive; the first spelling seen is the canonical one.
        keys: list[str] = []
        for label in labels:
            data = {"name": label} if isinstance(label, str) else dict(label)
            name = str(data["name"])
            key = name.lower()
            if key not in repo.labels:
                repo.labels[key] = _Label(
                    id=int(data.get("id") or self._allocate_id()),
                    name=name,
                    color=str(data.get("color") or "ededed"),
                    description=data.get("description"),
                    default=bool(data.get("default", False)),
                )
            if key not in keys:
                keys.append(key)
        return keys

    def _labels_from_body(self, body: Any) -> list[Any]:
        labels = body.get("labels") if isinstance(body, dict) else body
        if not isinstance(labels, list) or not all(
            isinstance(x, str) or (isinstance(x, dict) and isinstance(x.get("name"), str))
            for x in labels
        ):
            raise _validation_failed("Label", "labels")
        return labels

    def _set_issue_labels(self, issue: _Issue, keys: list[str], actor: str | None = None) -> None:
        if keys != issue.labels:
            issue.labels = keys
            issue.updated_at = _later(issue.updated_at)
            repo = next(
                (r for r in self._repos.values() if r.issues.get(issue.number) is issue), None
            )
            if repo is not None:
                self._notify("issues", "labeled", repo, issue, actor=actor or self.bot_login)

    def _apply_edit(self, repo: _Repo, issue: _Issue, fields: dict[str, Any], actor: str) -> None:
        # Validate everything first so a rejected edit leaves the issue untouched, as on GitHub.
        title = fields.get("title", issue.title)
        if not isinstance(title, str) or not title:
            raise _validation_failed("Issue", "title")
        state = fields.get("state", issue.state)
        if state not in ("open", "closed"):
            raise _validation_failed("Issue", "state")
        labels = (
            self._labels_from_body({"labels": fields["labels"] or []})
            if "labels" in fields
            else None
        )

        def snapshot() -> tuple[Any, ...]:
            return (issue.title, issue.body, issue.state, issue.state_reason)

        before = (snapshot(), list(issue.assignees), list(issue.labels))
        stamp = _later(issue.updated_at)
        issue.title = title
        if "body" in fields:
            issue.body = fields["body"]
        if "assignees" in fields:
            issue.assignees = [self._remember_user(a) for a in fields["assignees"] or []]
        if state != issue.state:
            closing = state == "closed"
            issue.state = state
            issue.closed_at = stamp if closing else None
            issue.closed_by = self._remember_user(actor) if closing else None
            issue.state_reason = fields.get("state_reason") or (
                "completed" if closing else "reopened"
            )
        elif "state_reason" in fields:
            issue.state_reason = fields["state_reason"]
        if labels is not None:
            issue.labels = self._label_keys(repo, labels)
        # A no-op PATCH leaves updated_at alone so it does not look like a change to a sync.
        if before != (snapshot(), issue.assignees, issue.labels):
            issue.updated_at = stamp
            self._notify("issues", "edited", repo, issue, actor=actor)

    def _since(self, query: dict[str, str]) -> datetime | None:
        if "since" not in query:
            return None
        try:
            return _parse_time(query["since"])
        except ValueError:
            raise _validation_failed("Issue", "since") from None

    def _descending(self, query: dict[str, str]) -> bool:
        direction = query.get("direction", "desc")
        if direction not in ("asc", "desc"):
            raise _validation_failed("Issue", "direction")
        return direction == "desc"

    def _paginate(
        self, base: str, path: str, query: dict[str, str], items: list[Any]
    ) -> tuple[list[Any], dict[str, str]]:
        try:
            per_page = min(max(int(query.get("per_page", DEFAULT_PER_PAGE)), 1), MAX_PER_PAGE)
            page = max(int(query.get("page", 1)), 1)
        except ValueError:
            raise _validation_failed("Issue", "page") from None
        last = max((len(items) + per_page - 1) // per_page, 1)

        def link(number: int) -> str:
            # GitHub keeps the caller's parameters and puts `page` last.
            kept = {k: v for k, v in query.items() if k != "page"}
            return f"{base}{path}?{urlencode({**kept, 'page': str(number)})}"

        rels: list[tuple[str, int]] = []
        if page > 1:
            rels += [("prev", min(page - 1, last)), ("first", 1)]
        if page < last:
            rels += [("next", page + 1), ("last", last)]
        headers = (
            {"Link": ", ".join(f'<{link(n)}>; rel="{rel}"' for rel, n in rels)} if rels else {}
        )
        start = (page - 1) * per_page
        return items[start : start + per_page], headers

    # ------------------------------------------------------------------------------ rendering

    def _render_user(self, base: str, login: str) -> dict[str, Any]:
        known = self._users.get(login) or {"login": login, "id": 0, "type": "User"}
        return {
            "login": login,
            "id": known["id"],
            "node_id": f"U_{known['id']}",
            "type": known["type"],
            "site_admin": known.get("site_admin", False),
            "url": f"{base}/users/{quote(login)}",
            "html_url": f"https://github.com/{quote(login)}",
            "avatar_url": f"https://avatars.githubusercontent.com/u/{known['id']}?v=4",
        }

    def _render_label(self, base: str, repo: _Repo, key: str) -> dict[str, Any]:
        label = repo.labels[key]
        return {
            "id": label.id,
            "node_id": f"LA_{label.id}",
            "url": f"{base}/repos/{repo.full_name}/labels/{quote(label.name, safe='')}",
            "name": label.name,
            "color": label.color,
            "default": label.default,
            "description": label.description,
        }

    def _render_labels(self, base: str, repo: _Repo, issue: _Issue) -> list[dict[str, Any]]:
        return [self._render_label(base, repo, key) for key in issue.labels]

    def _render_issue(self, base: str, repo: _Repo, issue: _Issue) -> dict[str, Any]:
        api = f"{base}/repos/{repo.full_name}"
        url = f"{api}/issues/{issue.number}"
        assignees = [self._render_user(base, login) for login in issue.assignees]
        return {
            **issue.extra,
            "id": issue.id,
            "node_id": f"I_{issue.id}",
            "number": issue.number,
            "url": url,
            "repository_url": api,
            "labels_url": url + "/labels{/name}",
            "comments_url": url + "/comments",
            "events_url": url + "/events",
            "timeline_url": url + "/timeline",
            "html_url": issue.html_url
            or f"https://github.com/{repo.full_name}/issues/{issue.number}",
            "title": issue.title,
            "body": issue.body,
            "state": issue.state,
            "state_reason": issue.state_reason,
            "locked": issue.locked,
            "user": self._render_user(base, issue.user),
            "labels": self._render_labels(base, repo, issue),
            "assignee": assignees[0] if assignees else None,
            "assignees": assignees,
            "comments": issue.comment_count,
            "created_at": _format_time(issue.created_at),
            "updated_at": _format_time(issue.updated_at),
            "closed_at": _format_time(issue.closed_at),
            "closed_by": self._render_user(base, issue.closed_by) if issue.closed_by else None,
        }

    def _render_comment(
        self, base: str, repo: _Repo, issue: _Issue, comment: _Comment
    ) -> dict[str, Any]:
        api = f"{base}/repos/{repo.full_name}"
        html = issue.html_url or f"https://github.com/{repo.full_name}/issues/{issue.number}"
        return {
            "author_association": "NONE",
            **comment.extra,
            "id": comment.id,
            "node_id": f"IC_{comment.id}",
            "url": f"{api}/issues/comments/{comment.id}",
            "html_url": f"{html}#issuecomment-{comment.id}",
            "issue_url": f"{api}/issues/{issue.number}",
            "user": self._render_user(base, comment.user),
            "body": comment.body,
            "created_at": _format_time(comment.created_at),
            "updated_at": _format_time(comment.updated_at),
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m triage.standins.github",
        description="Serve a local stand-in for GitHub's issues REST API.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--repo", default="pytorch/pytorch", help="owner/name the seeds belong to")
    parser.add_argument(
        "--seed",
        action="append",
        default=[],
        metavar="FILE.jsonl",
        help="issues in GitHub REST shape, one per line (repeatable)",
    )
    parser.add_argument("--token", default=None, help="reject requests without this token")
    parser.add_argument("--webhook-url", help="send signed deliveries here when an issue changes")
    parser.add_argument(
        "--webhook-secret", default="", help="the secret deliveries are signed with"
    )
    parser.add_argument(
        "--oauth-user",
        metavar="LOGIN",
        help="the account 'Sign in with GitHub' signs in (without it, the user declines)",
    )
    parser.add_argument(
        "--member",
        action="append",
        default=[],
        metavar="ORG:LOGIN[:TEAM,...]",
        help="a member of an organisation, and of its teams by slug (repeatable)",
    )
    args = parser.parse_args(argv)

    standin = GitHubStandIn(host=args.host, port=args.port, token=args.token)
    standin.add_repo(args.repo)
    for member in args.member:
        org, _, rest = member.partition(":")
        login, _, teams = rest.partition(":")
        if not org or not login:
            parser.error(f"--member wants ORG:LOGIN[:TEAM,...], got {member!r}")
        standin.add_member(org, login, [team for team in teams.split(",") if team])
    standin.sign_in_as(args.oauth_user)
    loaded = sum(standin.load_jsonl(args.repo, seed) for seed in args.seed)
    standin.start()
    if args.webhook_url:
        standin.send_webhooks(args.webhook_url, args.webhook_secret)
    print(f"GitHub stand-in for {args.repo} ({loaded} issues) at {standin.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        standin.stop()


if __name__ == "__main__":
    main()
