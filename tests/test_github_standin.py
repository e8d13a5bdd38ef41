"""The GitHub stand-in, exercised through the real PyGithub client over real HTTP.

These tests pin both sides of the contract the console relies on: that the stand-in answers
the way GitHub does, and how PyGithub 2.10 turns those answers into objects and exceptions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import github
import pytest
import requests
from github import Auth, Github, GithubRetry

from triage.standins.github import GitHubStandIn

if TYPE_CHECKING:
    from collections.abc import Iterator

    from github.Repository import Repository

REPO = "pytorch/pytorch"
TOKEN = "t"
PT2 = "oncall: pt2"
NEEDS_REPRO = "needs reproduction"


def client(standin: GitHubStandIn, **kwargs: Any) -> Github:
    options: dict[str, Any] = {
        "base_url": standin.url,
        "auth": Auth.Token(TOKEN),
        "retry": None,
        "seconds_between_requests": None,
        "seconds_between_writes": None,
        **kwargs,
    }
    return Github(**options)


def issue_json(number: int, *, labels: list[Any], updated: str, **extra: Any) -> dict[str, Any]:
    return {
        "number": number,
        "title": f"Issue {number}",
        "body": f"Body of {number}",
        "state": "open",
        "labels": labels,
        "user": {"login": "reporter"},
        "created_at": f"2026-11-{number:02d}T09:00:00Z",
        "updated_at": updated,
        **extra,
    }


@pytest.fixture
def standin() -> Iterator[GitHubStandIn]:
    with GitHubStandIn(token=TOKEN) as server:
        server.add_issue(
            REPO,
            issue_json(
                1,
                labels=[{"name": PT2, "color": "fbca04", "description": "PT2 oncall"}, "bug"],
                updated="2026-11-15T10:00:00Z",
                comments=[
                    {
                        "id": 11,
                        "user": {"login": "alice"},
                        "body": "first",
                        "created_at": "2026-11-02T00:00:00Z",
                    },
                    {
                        "id": 12,
                        "user": {"login": "bob"},
                        "body": "second",
                        "created_at": "2026-11-03T00:00:00Z",
                    },
                ],
            ),
        )
        server.add_issue(
            REPO, issue_json(2, labels=[NEEDS_REPRO], updated="2026-11-16T10:00:00Z", comments=4)
        )
        yield server


@pytest.fixture
def repo(standin: GitHubStandIn) -> Repository:
    return client(standin).get_repo(REPO)


def test_lists_issues_across_pages_filtered_by_labels_and_since(standin: GitHubStandIn) -> None:
    # 1-7 carry both labels; 3 is stale, 4 lacks a label, 5 is closed: 4 matches over 3 pages.
    for number in range(3, 10):
        labels = [PT2] if number == 4 else [PT2, "triaged"]
        updated = "2026-11-01T00:00:00Z" if number == 3 else f"2026-11-{number + 10:02d}T00:00:00Z"
        state = "closed" if number == 5 else "open"
        standin.add_issue(REPO, issue_json(number, labels=labels, updated=updated, state=state))
    standin.add_issue(REPO, issue_json(10, labels=[PT2, "triaged"], updated="2026-11-20T00:00:00Z"))
    standin.add_issue(REPO, issue_json(11, labels=["triaged", PT2], updated="2026-11-21T00:00:00Z"))
    repo = client(standin, per_page=2).get_repo(REPO)
    standin.reset_log()

    issues = repo.get_issues(
        labels=[PT2, "triaged"],
        since=datetime(2026, 11, 10, tzinfo=UTC),
        sort="updated",
        direction="asc",
    )

    assert [i.number for i in issues] == [6, 7, 8, 9, 10, 11]
    pages = [r for r in standin.requests if r.path == "/repos/pytorch/pytorch/issues"]
    assert [r.query.get("page") for r in pages] == [None, "2", "3"]
    assert all(r.query["labels"] == f"{PT2},triaged" for r in pages)
    assert pages[0].query["since"] == "2026-11-10T00:00:00Z"


def test_link_header_and_rate_limit_headers_on_the_wire(standin: GitHubStandIn) -> None:
    for number in range(3, 8):
        standin.add_issue(REPO, issue_json(number, labels=[], updated="2026-11-20T00:00:00Z"))
    response = requests.get(
        f"{standin.url}/repos/{REPO}/issues",
        params={"per_page": "2", "page": "2", "state": "all"},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=5,
    )

    assert response.status_code == 200
    assert [i["number"] for i in response.json()] == [5, 4]  # created desc by default
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"
    links = {rel: link["url"] for rel, link in response.links.items()}
    base = f"{standin.url}/repos/{REPO}/issues?per_page=2&state=all&page="
    assert links == {
        "prev": base + "1",
        "first": base + "1",
        "next": base + "3",
        "last": base + "4",
    }
    assert response.headers["X-RateLimit-Limit"] == "5000"
    assert response.headers["X-RateLimit-Resource"] == "core"
    remaining = int(response.headers["X-RateLimit-Remaining"])
    assert int(response.headers["X-RateLimit-Used"]) == 5000 - remaining
    assert int(response.headers["X-RateLimit-Reset"]) > time.time()


def test_get_issue_and_its_comments(repo: Repository, standin: GitHubStandIn) -> None:
    issue = repo.get_issue(1)

    assert issue.title == "Issue 1"
    assert issue.user.login == "reporter"
    assert [label.name for label in issue.labels] == [PT2, "bug"]
    assert issue.labels[0].color == "fbca04"
    assert issue.labels[0].description == "PT2 oncall"
    assert issue.comments == 2
    assert issue.updated_at == datetime(2026, 11, 15, 10, tzinfo=UTC)
    assert issue.html_url == "https://github.com/pytorch/pytorch/issues/1"
    assert issue.url == f"{standin.url}/repos/{REPO}/issues/1"
    comments = list(issue.get_comments())
    assert [(c.id, c.user.login, c.body) for c in comments] == [
        (11, "alice", "first"),
        (12, "bob", "second"),
    ]
    later = issue.get_comments(since=datetime(2026, 11, 2, 12, tzinfo=UTC))
    assert [c.id for c in later] == [12]
    # An integer comment count is reported as given even though no bodies were seeded.
    assert repo.get_issue(2).comments == 4


def test_unknown_issue_and_repo_are_unknown_objects(standin: GitHubStandIn) -> None:
    gh = client(standin)
    with pytest.raises(github.UnknownObjectException):
        gh.get_repo(REPO).get_issue(999)
    with pytest.raises(github.UnknownObjectException):
        gh.get_repo("pytorch/vision")


def test_add_and_remove_labels_with_colons_and_spaces(
    repo: Repository, standin: GitHubStandIn
) -> None:
    issue = repo.get_issue(2)

    issue.add_to_labels(PT2, "triaged")
    assert standin.label_names(REPO, 2) == [NEEDS_REPRO, PT2, "triaged"]
    issue.remove_from_labels(PT2)
    issue.remove_from_labels(NEEDS_REPRO)

    assert standin.label_names(REPO, 2) == ["triaged"]
    deletes = [w for w in standin.writes() if w.method == "DELETE"]
    # PyGithub percent-encodes the name into a single path segment.
    assert [d.path.rsplit("/", 1)[1] for d in deletes] == [
        "oncall%3A%20pt2",
        "needs%20reproduction",
    ]
    assert deletes[0].decoded_path.endswith("/labels/oncall: pt2")
    # add_to_labels posts a bare JSON list rather than {"labels": [...]}.
    posted = [w.json for w in standin.writes() if w.method == "POST"]
    assert posted == [[PT2, "triaged"]]


def test_removing_an_absent_label_is_a_404(repo: Repository, standin: GitHubStandIn) -> None:
    issue = repo.get_issue(2)
    with pytest.raises(github.GithubException) as raised:
        issue.remove_from_labels(PT2)

    assert raised.value.status == 404
    assert raised.value.data["message"] == "Label does not exist"
    # GitHub's message lacks "not found", so PyGithub does NOT raise UnknownObjectException here.
    assert not isinstance(raised.value, github.UnknownObjectException)
    assert standin.label_names(REPO, 2) == [NEEDS_REPRO]


def test_set_labels_replaces_and_label_names_are_case_insensitive(
    repo: Repository, standin: GitHubStandIn
) -> None:
    issue = repo.get_issue(1)
    issue.set_labels("Triaged", "BUG")
    assert standin.label_names(REPO, 1) == ["Triaged", "bug"]  # existing spelling wins
    issue.remove_from_labels("triaged")
    assert standin.label_names(REPO, 1) == ["bug"]


def test_create_comment_bumps_updated_at_and_count(
    repo: Repository, standin: GitHubStandIn
) -> None:
    issue = repo.get_issue(1)
    before = issue.updated_at

    comment = issue.create_comment("Routed to PT2 oncall.")

    assert comment.user.login == "triage-console-bot"
    assert comment.body == "Routed to PT2 oncall."
    assert comment.id > 12
    assert comment.html_url.endswith(f"/issues/1#issuecomment-{comment.id}")
    stored = standin.issue(REPO, 1)
    assert stored["comments"] == 3
    assert stored["updated_at"] > before.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert [c["body"] for c in standin.comments(REPO, 1)][-1] == "Routed to PT2 oncall."
    assert [c.body for c in repo.get_issue(1).get_comments()][-1] == "Routed to PT2 oncall."


def test_edit_closes_the_issue(repo: Repository, standin: GitHubStandIn) -> None:
    issue = repo.get_issue(2)

    issue.edit(state="closed", state_reason="not_planned")

    assert issue.state == "closed"
    assert issue.state_reason == "not_planned"
    assert issue.closed_by is not None
    assert issue.closed_by.login == "triage-console-bot"
    stored = standin.issue(REPO, 2)
    assert stored["state"] == "closed"
    assert stored["closed_at"] is not None
    assert [i.number for i in repo.get_issues()] == [1]
    assert [i.number for i in repo.get_issues(state="closed")] == [2]


def test_patch_is_all_or_nothing_and_noops_keep_updated_at(
    repo: Repository, standin: GitHubStandIn
) -> None:
    response = requests.patch(
        f"{standin.url}/repos/{REPO}/issues/1",
        json={"title": "half-applied?", "state": "resolved"},
        headers={"Authorization": f"token {TOKEN}"},
        timeout=5,
    )
    assert response.status_code == 422
    assert response.json()["errors"] == [{"resource": "Issue", "field": "state", "code": "invalid"}]
    assert standin.issue(REPO, 1)["title"] == "Issue 1"

    issue = repo.get_issue(1)
    issue.edit(title="Issue 1", labels=[PT2, "bug"])
    assert standin.issue(REPO, 1)["updated_at"] == "2026-11-15T10:00:00Z"


def test_human_edits_are_visible_to_an_incremental_sync(
    repo: Repository, standin: GitHubStandIn
) -> None:
    since = datetime(2026, 11, 17, tzinfo=UTC)
    assert list(repo.get_issues(since=since)) == []

    standin.set_labels(REPO, 1, ["module: inductor"])
    standin.edit_issue(REPO, 2, title="Retitled by a human")

    changed = {i.number: i for i in repo.get_issues(since=since)}
    assert [label.name for label in changed[1].labels] == ["module: inductor"]
    assert changed[2].title == "Retitled by a human"
    assert standin.issue(REPO, 1)["label_names"] == ["module: inductor"]
    with pytest.raises(ValueError, match="cannot edit"):
        standin.edit_issue(REPO, 1, milestone="v2.6")


def test_injected_502_fails_once_then_succeeds(repo: Repository, standin: GitHubStandIn) -> None:
    standin.inject("GET", r"/issues/1$", 502)

    with pytest.raises(github.GithubException) as raised:
        repo.get_issue(1)
    assert raised.value.status == 502
    assert raised.value.data == {
        "message": "Bad Gateway",
        "documentation_url": "https://docs.github.com/rest",
    }
    assert repo.get_issue(1).number == 1


def test_githubretry_retries_a_transient_502(standin: GitHubStandIn) -> None:
    retrying = client(standin, retry=GithubRetry(total=2, backoff_factor=0))
    repo = retrying.get_repo(REPO)
    standin.inject("*", r"/issues/1$", 502, times=2)
    standin.reset_log()

    assert repo.get_issue(1).number == 1
    assert len(standin.requests) == 3

    # When the retries run out urllib3 gives up with a requests error, not a GithubException.
    standin.inject("GET", r"/issues/1$", 503, times=3)
    with pytest.raises(requests.exceptions.RetryError):
        repo.get_issue(1)


def test_403_rate_limit_exposes_retry_headers(repo: Repository, standin: GitHubStandIn) -> None:
    reset = int(time.time()) + 120
    standin.inject("POST", r"/comments$", 403, retry_after=30, rate_limit_reset=reset)

    with pytest.raises(github.RateLimitExceededException) as raised:
        repo.get_issue(1).create_comment("hello")

    error = raised.value
    assert error.status == 403
    assert error.data["message"].startswith("API rate limit exceeded")
    assert error.headers is not None
    # PyGithub lower-cases response header names.
    assert error.headers["retry-after"] == "30"
    assert error.headers["x-ratelimit-remaining"] == "0"
    assert error.headers["x-ratelimit-reset"] == str(reset)
    assert standin.comments(REPO, 1)[-1]["body"] == "second"


def test_429_is_a_plain_githubexception(repo: Repository, standin: GitHubStandIn) -> None:
    standin.inject("GET", r"/issues$", 429, retry_after=5)

    with pytest.raises(github.GithubException) as raised:
        list(repo.get_issues())

    assert raised.value.status == 429
    assert not isinstance(raised.value, github.RateLimitExceededException)
    assert raised.value.headers is not None
    assert raised.value.headers["retry-after"] == "5"


@pytest.mark.parametrize(
    ("status", "message", "exception"),
    [
        (404, "Not Found", github.UnknownObjectException),
        (410, "Issues are disabled for this repo", github.GithubException),
        (422, "Validation Failed", github.GithubException),
        (500, "Server Error", github.GithubException),
    ],
)
def test_injected_error_bodies(
    repo: Repository,
    standin: GitHubStandIn,
    status: int,
    message: str,
    exception: type[github.GithubException],
) -> None:
    standin.inject("PATCH", r"/issues/\d+$", status)

    with pytest.raises(exception) as raised:
        repo.get_issue(2).edit(title="new")

    assert raised.value.status == status
    assert raised.value.data["message"] == message
    assert standin.issue(REPO, 2)["title"] == "Issue 2"


def test_injection_only_hits_matching_method_and_path(
    repo: Repository, standin: GitHubStandIn
) -> None:
    standin.inject("POST", r"/labels$", 500, times=2)

    assert repo.get_issue(1).title == "Issue 1"  # GET is untouched
    for _ in range(2):
        with pytest.raises(github.GithubException):
            repo.get_issue(1).add_to_labels("triaged")
    repo.get_issue(1).add_to_labels("triaged")
    assert "triaged" in standin.label_names(REPO, 1)


def test_delay_beyond_client_timeout_raises_read_timeout(standin: GitHubStandIn) -> None:
    repo = client(standin, timeout=1).get_repo(REPO)
    standin.inject("GET", r"/issues/1$", 0, delay=1.5)

    started = time.monotonic()
    with pytest.raises(requests.exceptions.ReadTimeout):
        repo.get_issue(1)
    assert time.monotonic() - started < 1.4
    assert repo.get_issue(2).number == 2


def test_wrong_token_is_bad_credentials(standin: GitHubStandIn) -> None:
    intruder = Github(base_url=standin.url, auth=Auth.Token("nope"), retry=None)
    with pytest.raises(github.BadCredentialsException):
        intruder.get_repo(REPO)
    anonymous = Github(base_url=standin.url, retry=None)
    with pytest.raises(github.BadCredentialsException):
        anonymous.get_repo(REPO)


def test_rate_limit_counts_down_and_is_reported(standin: GitHubStandIn) -> None:
    gh = client(standin)
    repo = gh.get_repo(REPO)
    first_remaining, limit = gh.rate_limiting
    repo.get_issue(1)

    assert limit == 5000
    assert gh.rate_limiting == (first_remaining - 1, 5000)
    core = gh.get_rate_limit().resources.core
    assert core.limit == 5000
    assert core.remaining == first_remaining - 1  # asking for the limit is free
    assert core.reset > datetime.now(UTC)


def test_concurrent_comments_get_unique_ids(standin: GitHubStandIn) -> None:
    def post(worker: int) -> None:
        issue = client(standin).get_repo(REPO).get_issue(2)
        for n in range(5):
            issue.create_comment(f"worker {worker} comment {n}")

    threads = [threading.Thread(target=post, args=(w,)) for w in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    ids = [c["id"] for c in standin.comments(REPO, 2)]
    assert len(ids) == len(set(ids)) == 30
    assert standin.issue(REPO, 2)["comments"] == 34


def test_load_jsonl_and_module_entry_point(tmp_path: Path) -> None:
    seed = tmp_path / "issues.jsonl"
    lines = [issue_json(n, labels=["triaged"], updated="2026-11-20T00:00:00Z") for n in (5, 6)]
    seed.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    with GitHubStandIn() as server:
        assert server.load_jsonl("acme/widgets", seed) == 2
        assert server.issue("acme/widgets", 6)["label_names"] == ["triaged"]

    process = subprocess.Popen(
        [sys.executable, "-m", "triage.standins.github", "--port", "0", "--seed", str(seed)],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        url = banner.rsplit(" ", 1)[1].strip()
        assert "(2 issues)" in banner
        titles = [i.title for i in Github(base_url=url, retry=None).get_repo(REPO).get_issues()]
        assert titles == ["Issue 6", "Issue 5"]
    finally:
        process.terminate()
        process.wait(timeout=5)
