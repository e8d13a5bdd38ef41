"""The development index of real pytorch/pytorch issues, and the cache of their texts.

The index (`triage/devset/real-index.jsonl`) is committed and holds facts only: an issue's
number, creation date, state, final labels, the queues it belongs to and its split. The texts
are other people's words: they stay in the git-ignored `.devcache/`, either as the search
answers they were found in (`.devcache/search/*.json`, kept exactly as returned) or as GitHub's
own answer (`.devcache/github/<number>.json`, written by `manage.py fetch_issues`). This module
reads both and writes the backtest's input: GitHub's REST shape, plus `queue` and `split`.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage.backtest import closure

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

BASE_DIR = Path(__file__).resolve().parent.parent
CACHE_DIR = BASE_DIR / ".devcache"
# Inside the cache: search answers, GitHub answers, and the backtest's input made from them.
SEARCH = "search"
GITHUB = "github"
BACKTEST_INPUT = "real-issues.jsonl"
INDEX = BASE_DIR / "triage" / "devset" / "real-index.jsonl"
REPOSITORY = "pytorch/pytorch"

# One in three issues, by number, is held out: rules are tuned on the rest and judged on these.
CHECK_MODULUS = 3


def split_of(number: int) -> str:
    return "check" if number % CHECK_MODULUS == 0 else "tune"


def queues_of(labels: Iterable[str]) -> list[str]:
    """The queues an issue was triaged in, from its final labels closed under the implications.

    Every issue came in through the untriaged inflow; an `oncall:` label put it in pt2 or
    distributed (or one of distributed's sub-oncalls, which came in 2026).
    """
    closed = closure(labels)
    queues = []
    if "oncall: pt2" in closed:
        queues.append("pt2")
    if any(
        label == "oncall: distributed" or label.startswith("oncall: distributed ")
        for label in closed
    ):
        queues.append("distributed")
    queues.append("triage")
    return queues


# A bot's "cc @user ..." line says who was notified after labelling: it would leak the labels.
CC_LINE = re.compile(r"^[ \t]*cc[ \t]+@.*(?:\n|$)", re.MULTILINE | re.IGNORECASE)


def without_cc_lines(text: str) -> str:
    return CC_LINE.sub("", text)


# An excerpt of the issues corpus:
#   pytorch/pytorch · issue #123 · closed · Python
#   labels: a, b            (absent when the issue has none)
#   # Title
#
#   author · description · 2025-03-05      or   [turn 3 by author, continued]
#   text ...
#   author · comment · 2025-03-06
#   text ...
EXCERPT_HEAD = re.compile(
    r"^(?P<repo>[\w.-]+/[\w.-]+) · (?P<kind>issue|pull request) #(?P<number>\d+) · (?P<state>open|closed)\b"
)
TURN_HEAD = re.compile(
    r"^(?:(?P<author>\S+) · (?P<kind>description|comment) · (?P<date>\d{4}-\d{2}-\d{2})"
    r"|\[turn (?P<turn>\d+) by (?P<cont_author>\S+), continued\])$",
    re.MULTILINE,
)


@dataclass
class Turn:
    author: str
    day: date | None = None
    chunks: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        text = text.strip("\n")
        if not text.strip():
            return
        # Two queries may return overlapping pieces of one turn: keep the longest of each.
        if any(text in chunk for chunk in self.chunks):
            return
        self.chunks = [chunk for chunk in self.chunks if chunk not in text] + [text]

    @property
    def text(self) -> str:
        return "\n\n[…]\n\n".join(self.chunks)


@dataclass
class CachedIssue:
    number: int
    title: str
    state: str
    labels: list[str]
    created: date | None = None
    # The description is turn 0, comments count up from 1; a comment whose turn an excerpt
    # does not tell is keyed by its author and day instead.
    turns: dict[int | tuple[str, str], Turn] = field(default_factory=dict)
    source: str = "search"

    def body(self) -> str:
        turn = self.turns.get(0)
        return turn.text if turn else ""

    def comments(self) -> list[tuple[str, Turn]]:
        numbered = sorted((k, t) for k, t in self.turns.items() if isinstance(k, int) and k)
        keyed = sorted(
            ((k, t) for k, t in self.turns.items() if isinstance(k, tuple)), key=lambda kt: kt[0]
        )
        return [(str(k), t) for k, t in numbered] + [(f"{k[0]}@{k[1]}", t) for k, t in keyed]


class CacheFormatError(ValueError):
    pass


def parse_excerpt(excerpt: str) -> CachedIssue | None:
    """One search result as an issue of pytorch/pytorch, or None for anything else."""
    lines = excerpt.split("\n")
    head = EXCERPT_HEAD.match(lines[0]) if lines else None
    if head is None or head["repo"] != REPOSITORY or head["kind"] != "issue":
        return None
    rest = lines[1:]
    labels: list[str] = []
    if rest and rest[0].startswith("labels: "):
        labels = [label for label in rest[0][len("labels: ") :].split(", ") if label]
        rest = rest[1:]
    if not rest or not rest[0].startswith("# "):
        raise CacheFormatError(f"issue #{head['number']}: no title line")
    issue = CachedIssue(
        number=int(head["number"]), title=rest[0][2:], state=head["state"], labels=labels
    )
    text = "\n".join(rest[1:])
    heads = list(TURN_HEAD.finditer(text))
    turn: int | None = None
    for index, match in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else len(text)
        chunk = text[match.end() : end]
        key: int | tuple[str, str]
        if match["turn"] is not None:
            turn = int(match["turn"])
            key, author, day = turn, match["cont_author"], None
        else:
            author, day = match["author"], date.fromisoformat(match["date"])
            if match["kind"] == "description":
                turn = 0
                issue.created = day
            elif turn is not None:
                turn += 1
            key = turn if turn is not None else (author, match["date"])
        found = issue.turns.setdefault(key, Turn(author=author))
        found.day = found.day or day
        found.add(chunk)
    return issue


def merge(into: CachedIssue, other: CachedIssue) -> None:
    into.created = into.created or other.created
    for key, turn in other.turns.items():
        mine = into.turns.setdefault(key, Turn(author=turn.author, day=turn.day))
        mine.day = mine.day or turn.day
        for chunk in turn.chunks:
            mine.add(chunk)


def read_search_cache(directory: Path) -> dict[int, CachedIssue]:
    issues: dict[int, CachedIssue] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            answer = json.loads(path.read_text(encoding="utf-8"))
            results = answer["results"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CacheFormatError(f"{path}: not a search answer ({exc})") from None
        for result in results:
            try:
                issue = parse_excerpt(result["excerpt"])
            except CacheFormatError as exc:
                raise CacheFormatError(f"{path}: {exc}") from None
            if issue is None:
                continue
            if issue.number in issues:
                merge(issues[issue.number], issue)
            else:
                issues[issue.number] = issue
    return issues


def read_github_cache(directory: Path) -> dict[int, CachedIssue]:
    """Issues as `manage.py fetch_issues` stored them: GitHub's own answer, whole."""
    issues: dict[int, CachedIssue] = {}
    for path in sorted(directory.glob("*.json")):
        stored = json.loads(path.read_text(encoding="utf-8"))
        raw, comments = stored["issue"], stored["comments"]
        created = date.fromisoformat(raw["created_at"][:10])
        issue = CachedIssue(
            number=int(raw["number"]),
            title=raw["title"],
            state=raw["state"],
            labels=list(raw["labels"]),
            created=created,
            source="github",
        )
        issue.turns[0] = Turn(author=raw["user"]["login"], day=created)
        issue.turns[0].add(raw.get("body") or "")
        for number, comment in enumerate(comments, start=1):
            day = date.fromisoformat(comment["created_at"][:10])
            issue.turns[number] = Turn(author=comment["user"]["login"], day=day)
            issue.turns[number].add(comment.get("body") or "")
        issues[issue.number] = issue
    return issues


def read_cache(cache: Path = CACHE_DIR) -> dict[int, CachedIssue]:
    """Every cached issue; GitHub's whole answer wins over search excerpts of the same issue."""
    issues = read_search_cache(cache / SEARCH) if (cache / SEARCH).is_dir() else {}
    if (cache / GITHUB).is_dir():
        issues |= read_github_cache(cache / GITHUB)
    return issues


class CreationDates:
    """When issues were created, known from the description's date where an excerpt shows it.

    Issue and pull-request numbers grow with time, so an issue seen only through a comment gets
    the date of its nearest neighbours by number, never later than its first dated turn.
    """

    def __init__(self, issues: Iterable[CachedIssue]) -> None:
        known = sorted((i.number, i.created) for i in issues if i.created is not None)
        self.numbers = [number for number, _ in known]
        self.days = [day for _, day in known]

    def estimate(self, issue: CachedIssue) -> date | None:
        if not self.numbers:
            return None
        at = bisect.bisect_left(self.numbers, issue.number)
        neighbours = [self.days[i] for i in (at - 1, at) if 0 <= i < len(self.days)]
        low, high = min(neighbours), max(neighbours)
        guess = low + (high - low) / 2
        dated = [turn.day for turn in issue.turns.values() if turn.day is not None]
        return min([guess, *dated])


def index_rows(issues: dict[int, CachedIssue]) -> list[dict[str, Any]]:
    """One line of facts per issue: no title, body or comment."""
    dates = CreationDates(issues.values())
    rows = []
    for number in sorted(issues):
        issue = issues[number]
        created = issue.created or dates.estimate(issue)
        # An issue nobody labelled was never triaged: it has no answer to score against.
        if created is None or not issue.labels:
            continue
        rows.append(
            {
                "number": number,
                "created_at": created.isoformat(),
                "created_at_estimated": issue.created is None,
                "state": issue.state,
                "labels": sorted(issue.labels),
                "queue": queues_of(issue.labels),
                "split": split_of(number),
            }
        )
    return rows


def read_index(path: Path = INDEX) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
            count += 1
    return count


def backtest_rows(
    index: list[dict[str, Any]], issues: dict[int, CachedIssue]
) -> Iterator[dict[str, Any]]:
    """The indexed issues whose text is cached, as the backtest reads them.

    The facts (labels, state, date, queue, split) come from the index; the text from the cache,
    without `cc @` lines. No intake labels: the backtest shows each queue's entry label only.
    """
    for entry in index:
        issue = issues.get(entry["number"])
        if issue is None:
            continue
        created = f"{entry['created_at']}T00:00:00Z"
        comments = []
        for position, (key, turn) in enumerate(issue.comments(), start=1):
            comments.append(
                {
                    # Unique across the file, as GitHub's comment ids are.
                    "id": entry["number"] * 1000 + position,
                    "user": {"login": turn.author},
                    "body": without_cc_lines(turn.text),
                    "created_at": f"{turn.day.isoformat()}T00:00:00Z" if turn.day else created,
                    "turn": key,
                }
            )
        yield {
            "number": entry["number"],
            "title": issue.title,
            "body": without_cc_lines(issue.body()),
            "state": entry["state"],
            "labels": [{"name": label} for label in entry["labels"]],
            "user": {"login": issue.turns[0].author if 0 in issue.turns else ""},
            "created_at": created,
            "updated_at": created,
            "html_url": f"https://github.com/{REPOSITORY}/issues/{entry['number']}",
            "comments": comments,
            "queue": entry["queue"],
            "split": entry["split"],
        }
