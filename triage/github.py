"""The one way this app reaches GitHub: PyGithub, against a configurable API base URL.

PyGithub's own retry loop is turned off: a worker must not sleep through a rate-limit window.
Failures are sorted here into retryable ones (rate limits, 5xx, timeouts), which carry how long
to wait, and permanent ones, which carry the reason to show a human.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from typing import TYPE_CHECKING, Any

import requests
from django.conf import settings
from github import Auth, Github, GithubException

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from datetime import datetime

    from github.Issue import Issue as GithubIssue
    from github.IssueComment import IssueComment

PERMANENT_STATUSES = {401, 403, 404, 410, 422}


class GitHubError(Exception):
    pass


class RetryableGitHubError(GitHubError):
    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentGitHubError(GitHubError):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def client() -> Github:
    auth = Auth.Token(settings.GITHUB_TOKEN) if settings.GITHUB_TOKEN else None
    return Github(
        base_url=settings.GITHUB_API_URL,
        auth=auth,
        timeout=int(settings.GITHUB_TIMEOUT_SECONDS),
        per_page=100,
        retry=None,
        seconds_between_requests=None,
        seconds_between_writes=settings.GITHUB_SECONDS_BETWEEN_WRITES or None,
    )


def _header(headers: Mapping[str, Any] | None, name: str) -> str | None:
    for key, value in (headers or {}).items():
        if key.lower() == name:
            return str(value)
    return None


def _message(exc: GithubException) -> str:
    data = exc.data
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return str(data or exc)


def backoff(attempt: int) -> float:
    """Exponential backoff with jitter for 5xx and timeouts: 5 s, 10 s, 20 s, ... up to 10 min
    (GITHUB_BACKOFF_SECONDS sets the first step)."""
    delay: float = min(600.0, settings.GITHUB_BACKOFF_SECONDS * 2.0 ** max(attempt - 1, 0))
    return delay * random.uniform(0.8, 1.2)


def classify(exc: GithubException, attempt: int = 1) -> GitHubError:
    status = exc.status
    headers = exc.headers
    message = _message(exc)
    retry_after = _header(headers, "retry-after")
    remaining = _header(headers, "x-ratelimit-remaining")
    reset = _header(headers, "x-ratelimit-reset")
    rate_limited = status == 429 or (
        status == 403
        and (retry_after is not None or remaining == "0" or "rate limit" in message.lower())
    )
    if rate_limited:
        if retry_after is not None and retry_after.isdigit():
            wait = float(retry_after)
        elif reset is not None and reset.isdigit():
            wait = max(float(reset) - time.time(), 0.0) + 1.0
        else:
            # GitHub's advice for secondary limits without headers: wait at least a minute.
            wait = 60.0
        return RetryableGitHubError(f"GitHub rate limit ({status}): {message}", wait)
    if status >= 500:
        return RetryableGitHubError(f"GitHub error {status}: {message}", backoff(attempt))
    if status in PERMANENT_STATUSES:
        return PermanentGitHubError(f"GitHub refused ({status}): {message}", status)
    return PermanentGitHubError(f"GitHub answered {status}: {message}", status)


@contextlib.contextmanager
def translated_errors(attempt: int = 1) -> Iterator[None]:
    try:
        yield
    except GithubException as exc:
        raise classify(exc, attempt) from exc
    except (requests.Timeout, requests.ConnectionError) as exc:
        raise RetryableGitHubError(f"GitHub unreachable: {exc}", backoff(attempt)) from exc


def listing_unchanged(
    repository: str, *, labels: list[str], since: datetime | None, state: str, etag: str
) -> tuple[bool, str]:
    """Ask for the first page of the listing with the stored ETag: (True, etag) when GitHub
    answers 304, which costs no rate-limit unit; else (False, the new ETag)."""
    gh = client()
    parameters: dict[str, Any] = {
        "state": state,
        "sort": "updated",
        "direction": "asc",
        "per_page": 100,
    }
    if labels:
        parameters["labels"] = ",".join(labels)
    if since is not None:
        parameters["since"] = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    headers = {"If-None-Match": etag} if etag else {}
    with translated_errors():
        status, response_headers, output = gh.requester.requestJson(
            "GET", f"/repos/{repository}/issues", parameters, headers
        )
        if status >= 400:
            raise GithubException(status, output, response_headers)
    new_etag = str(_header(response_headers, "etag") or "")
    return status == 304, new_etag or etag


def rate_budget() -> tuple[int, int, datetime]:
    """GitHub's core rate limit now: remaining, limit, reset time (asking is free)."""
    with translated_errors():
        core = client().get_rate_limit().resources.core
        return core.remaining, core.limit, core.reset


def iter_issues(
    repository: str, *, labels: list[str], since: datetime | None, state: str
) -> Iterator[tuple[dict[str, Any], Callable[[], list[dict[str, Any]]]]]:
    """Issues of a repository, oldest update first, in GitHub's REST shape, each with a way to
    read its comments (one request, made only if called; `comments` holds their count).

    Sorting by update time ascending lets a sync that is interrupted resume from the last
    `updated_at` it stored. Pull requests are left out.
    """
    gh = client()
    with translated_errors():
        repo = gh.get_repo(repository)
        kwargs: dict[str, Any] = {"state": state, "sort": "updated", "direction": "asc"}
        if labels:
            kwargs["labels"] = labels
        if since is not None:
            kwargs["since"] = since
        for issue in repo.get_issues(**kwargs):
            # `pull_request` is absent from plain issues, and reading an absent attribute makes
            # PyGithub fetch the whole issue again; a pull request's page is under /pull/.
            if "/pull/" in issue.html_url:
                continue
            yield _issue_dict(issue), functools.partial(_read_comments, issue)


def _read_comments(issue: GithubIssue) -> list[dict[str, Any]]:
    with translated_errors():
        return [_comment_dict(c) for c in issue.get_comments()] if issue.comments else []


def iter_repository_comments(
    repository: str, since: datetime | None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every comment of the repository's issues updated since `since`, 100 a request, with the
    number of its issue: cheaper than a request per issue when many issues need theirs."""
    gh = client()
    with translated_errors():
        repo = gh.get_repo(repository)
        kwargs: dict[str, Any] = {"sort": "updated", "direction": "asc"}
        if since is not None:
            kwargs["since"] = since
        for comment in repo.get_issues_comments(**kwargs):
            number = comment.issue_url.rstrip("/").rsplit("/", 1)[-1]
            if number.isdigit():
                yield int(number), _comment_dict(comment)


# PyGithub's raw_data re-fetches an object that came from a list: one request per issue and per
# comment. Its attributes are already filled in by the list answer, so the dicts are built here.
def _issue_dict(issue: GithubIssue) -> dict[str, Any]:
    return {
        "number": issue.number,
        "title": issue.title,
        "body": issue.body,
        "state": issue.state,
        "labels": [label.name for label in issue.labels],
        "user": {"login": issue.user.login if issue.user else ""},
        "created_at": issue.created_at.isoformat(),
        "updated_at": issue.updated_at.isoformat(),
        "html_url": issue.html_url,
        "comments": issue.comments,
    }


def _comment_dict(comment: IssueComment) -> dict[str, Any]:
    return {
        "id": comment.id,
        "user": {"login": comment.user.login if comment.user else ""},
        "body": comment.body,
        "created_at": comment.created_at.isoformat(),
    }


def fetch_issue(repository: str, number: int, attempt: int = 1) -> GithubIssue:
    """A fresh read of one issue: what is on GitHub now, not what the last sync saw."""
    gh = client()
    with translated_errors(attempt):
        return gh.get_repo(repository).get_issue(number)


def read_issue(
    repository: str, number: int, attempt: int = 1
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One issue and its comments in GitHub's REST shape, as `iter_issues` yields them."""
    gh = client()
    with translated_errors(attempt):
        issue = gh.get_repo(repository).get_issue(number)
        comments = [_comment_dict(c) for c in issue.get_comments()] if issue.comments else []
        return _issue_dict(issue), comments


def label_names(issue: GithubIssue) -> list[str]:
    return [label.name for label in issue.labels]


def add_labels(issue: GithubIssue, labels: list[str], attempt: int = 1) -> None:
    with translated_errors(attempt):
        issue.add_to_labels(*labels)


def remove_label(issue: GithubIssue, label: str, attempt: int = 1) -> None:
    try:
        with translated_errors(attempt):
            issue.remove_from_labels(label)
    except PermanentGitHubError as exc:
        # Someone removed it in the meantime: the goal is reached.
        if exc.status != 404:
            raise


def own_login(attempt: int = 1) -> str:
    """The login of the account the console writes as."""
    key = (settings.GITHUB_API_URL, settings.GITHUB_TOKEN)
    if key not in _own_logins:
        with translated_errors(attempt):
            _own_logins[key] = client().get_user().login
    return _own_logins[key]


_own_logins: dict[tuple[str, str], str] = {}


def find_comment(issue: GithubIssue, marker: str, attempt: int = 1) -> int | None:
    """The console's own earlier comment carrying `marker`; anyone else's does not count."""
    me = own_login(attempt)
    with translated_errors(attempt):
        for comment in issue.get_comments():
            if marker in (comment.body or "") and comment.user and comment.user.login == me:
                return int(comment.id)
    return None


def post_comment(issue: GithubIssue, body: str, attempt: int = 1) -> int:
    with translated_errors(attempt):
        return int(issue.create_comment(body).id)


def close(issue: GithubIssue, attempt: int = 1) -> None:
    with translated_errors(attempt):
        issue.edit(state="closed", state_reason="not_planned")
