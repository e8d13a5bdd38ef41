"""Turning issues in GitHub's REST shape into rows, from a sync or from an offline file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.dateparse import parse_datetime

from triage.models import Issue

if TYPE_CHECKING:
    from datetime import datetime

REQUIRED = ("number", "title", "state", "created_at", "updated_at")


class IssueFormatError(ValueError):
    pass


@dataclass(frozen=True)
class IssueFields:
    number: int
    title: str
    body: str
    state: str
    author: str
    html_url: str
    labels: list[str]
    comments: list[dict[str, Any]] | None  # None: the source did not carry them
    created_at: datetime
    updated_at: datetime

    def as_model_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "title": self.title,
            "body": self.body,
            "state": self.state,
            "author": self.author,
            "html_url": self.html_url,
            "labels": self.labels,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        if self.comments is not None:
            fields["comments"] = self.comments
        return fields


def _timestamp(raw: dict[str, Any], key: str) -> datetime:
    value = raw.get(key)
    parsed = parse_datetime(value) if isinstance(value, str) else None
    if parsed is None or parsed.tzinfo is None:
        raise IssueFormatError(
            f"{key!r} must be an ISO 8601 timestamp with a time zone, got {value!r}"
        )
    return parsed


def _login(user: Any) -> str:
    if isinstance(user, dict):
        return str(user.get("login") or "")
    return ""


def _label_name(label: Any) -> str:
    if isinstance(label, str):
        return label
    if isinstance(label, dict) and isinstance(label.get("name"), str):
        return str(label["name"])
    raise IssueFormatError(f"a label must be a name or an object with a name, got {label!r}")


def _comment(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or not isinstance(raw.get("body", ""), str):
        raise IssueFormatError(f"a comment must be an object with a body, got {raw!r:.80}")
    if not isinstance(raw.get("id"), int):
        raise IssueFormatError("a comment needs an integer 'id'")
    return {
        "id": raw["id"],
        "author": _login(raw.get("user")),
        "body": raw.get("body") or "",
        "created_at": raw.get("created_at") or "",
    }


def parse(raw: Any, comments: list[Any] | None = None) -> IssueFields:
    """Validate one issue object; `comments` overrides a `comments` list inside it."""
    if not isinstance(raw, dict):
        raise IssueFormatError("an issue must be a JSON object")
    missing = [key for key in REQUIRED if key not in raw]
    if missing:
        raise IssueFormatError(f"missing field {missing[0]!r}")
    if not isinstance(raw["number"], int) or isinstance(raw["number"], bool) or raw["number"] < 1:
        raise IssueFormatError(f"'number' must be a positive integer, got {raw['number']!r}")
    if not isinstance(raw["title"], str):
        raise IssueFormatError("'title' must be a string")
    if raw.get("body") is not None and not isinstance(raw["body"], str):
        raise IssueFormatError("'body' must be a string or null")
    if raw["state"] not in ("open", "closed"):
        raise IssueFormatError(f"'state' must be 'open' or 'closed', got {raw['state']!r}")
    labels = raw.get("labels") or []
    if not isinstance(labels, list):
        raise IssueFormatError("'labels' must be a list")
    if comments is None and isinstance(raw.get("comments"), list):
        comments = raw["comments"]
    return IssueFields(
        number=raw["number"],
        title=raw["title"],
        body=raw.get("body") or "",
        state=raw["state"],
        author=_login(raw.get("user")),
        html_url=str(raw.get("html_url") or ""),
        labels=sorted({_label_name(label) for label in labels}),
        comments=None if comments is None else [_comment(c) for c in comments],
        created_at=_timestamp(raw, "created_at"),
        updated_at=_timestamp(raw, "updated_at"),
    )


def upsert(repository: str, fields: IssueFields) -> tuple[Issue, bool]:
    """Create or update the issue; True when anything a proposal looks at changed."""
    values = fields.as_model_fields()
    issue = Issue.objects.filter(repository=repository, number=fields.number).first()
    if issue is None:
        values.setdefault("comments", [])
        issue = Issue.objects.create(repository=repository, number=fields.number, **values)
        return issue, True
    before = issue.content_hash
    changed_any = False
    for key, value in values.items():
        if getattr(issue, key) != value:
            setattr(issue, key, value)
            changed_any = True
    if changed_any:
        issue.save()
    return issue, issue.content_hash != before
