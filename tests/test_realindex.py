"""The development index of real issues: reading the search cache, facts only in the index."""

from __future__ import annotations

import json
from datetime import date
from io import StringIO
from typing import TYPE_CHECKING

import pytest
from django.core.management import CommandError, call_command

from triage import realindex

if TYPE_CHECKING:
    from pathlib import Path

    from triage.standins.github import GitHubStandIn

# Excerpts in the issues corpus's shape. Every word of them is made up for these tests.
DESCRIPTION = (
    "pytorch/pytorch · issue #{number} · {state} · Python\n"
    "labels: {labels}\n"
    "# {title}\n"
    "\n"
    "reporter · description · {day}\n"
    "{body}\n"
    "\n"
    "helper · comment · {day}\n"
    "{comment}"
)
CONTINUED = (
    "pytorch/pytorch · issue #{number} · {state} · Python\n"
    "labels: {labels}\n"
    "# {title}\n"
    "\n"
    "[turn 0 by reporter, continued]\n"
    "{body}"
)


def excerpt(template: str = DESCRIPTION, **fields: object) -> dict[str, object]:
    values: dict[str, object] = {
        "number": 1000,
        "state": "open",
        "labels": "oncall: pt2, module: dynamo",
        "title": "compile fails on a toy model",
        "day": "2024-05-06",
        "body": "Graph break in my toy.\ncc @someone @other",
        "comment": "Try fullgraph=False.",
    } | fields
    return {"rank": 1, "excerpt": template.format(**values)}


def write_answer(cache: Path, name: str, *results: dict[str, object]) -> None:
    folder = cache / realindex.SEARCH
    folder.mkdir(parents=True, exist_ok=True)
    answer = {"corpus": "issues", "query": name, "count": len(results), "results": list(results)}
    (folder / f"{name}.json").write_text(json.dumps(answer, ensure_ascii=False))


def test_an_excerpt_is_read_into_title_labels_turns_and_date():
    issue = realindex.parse_excerpt(str(excerpt()["excerpt"]))

    assert issue is not None
    assert (issue.number, issue.state, issue.title) == (
        1000,
        "open",
        "compile fails on a toy model",
    )
    assert issue.labels == ["oncall: pt2", "module: dynamo"]
    assert issue.created == date(2024, 5, 6)
    assert issue.body().startswith("Graph break in my toy.")
    assert [(key, turn.text) for key, turn in issue.comments()] == [("1", "Try fullgraph=False.")]


@pytest.mark.parametrize(
    "head",
    [
        "someone/fork · issue #1000 · open · Python",
        "pytorch/pytorch · pull request #1000 · open · Python",
    ],
)
def test_other_repositories_and_pull_requests_are_not_issues_of_the_index(head):
    text = str(excerpt()["excerpt"]).split("\n", 1)[1]
    assert realindex.parse_excerpt(f"{head}\n{text}") is None


def test_an_issue_without_labels_has_no_labels_line():
    text = str(excerpt()["excerpt"]).replace("labels: oncall: pt2, module: dynamo\n", "")
    issue = realindex.parse_excerpt(text)
    assert issue is not None and issue.labels == []


def test_overlapping_pieces_of_a_turn_keep_the_longest(tmp_path):
    write_answer(tmp_path, "a", excerpt(template=CONTINUED, body="first half"))
    write_answer(
        tmp_path, "b", excerpt(body="Graph break.\nfirst half and second half", comment="ok")
    )
    issue = realindex.read_cache(tmp_path)[1000]

    assert issue.body() == "Graph break.\nfirst half and second half"
    assert issue.created == date(2024, 5, 6)


def test_queues_follow_the_labels_closed_under_the_implications():
    assert realindex.queues_of(["module: inductor"]) == ["pt2", "triage"]
    assert realindex.queues_of(["oncall: distributed checkpointing"]) == ["distributed", "triage"]
    assert realindex.queues_of(["oncall: jit"]) == ["triage"]


def test_the_split_is_by_number_one_in_three_held_out():
    splits = [realindex.split_of(number) for number in range(1, 301)]
    assert splits.count("check") == 100
    assert realindex.split_of(999) == "check" and realindex.split_of(1000) == "tune"


def test_an_issue_seen_only_through_a_comment_gets_its_neighbours_date(tmp_path):
    only_comment = (
        "pytorch/pytorch · issue #{number} · closed · Python\n"
        "labels: oncall: jit\n"
        "# {title}\n"
        "\n"
        "helper · comment · 2023-02-01\n"
        "{comment}"
    )
    write_answer(
        tmp_path,
        "a",
        excerpt(number=100, day="2023-01-01"),
        excerpt(number=300, day="2023-01-21"),
        excerpt(template=only_comment, number=200),
        excerpt(number=400, labels="", day="2023-01-30"),
    )
    rows = {row["number"]: row for row in realindex.index_rows(realindex.read_cache(tmp_path))}

    assert rows[200]["created_at"] == "2023-01-11"
    assert rows[200]["created_at_estimated"] is True
    assert rows[100]["created_at_estimated"] is False
    # Nobody labelled #400: it was never triaged, so there is nothing to score it against.
    assert 400 not in rows


def test_the_index_holds_facts_and_the_backtest_input_the_text_without_cc_lines(tmp_path):
    cache, index = tmp_path / "cache", tmp_path / "index.jsonl"
    write_answer(cache, "a", excerpt(number=1002), excerpt(number=1003, state="closed"))
    out = StringIO()
    call_command("build_real_index", "--add-new", "--index", index, "--cache", cache, stdout=out)

    facts = [json.loads(line) for line in index.read_text().splitlines()]
    assert [row["number"] for row in facts] == [1002, 1003]
    assert set(facts[0]) == {
        "number",
        "created_at",
        "created_at_estimated",
        "state",
        "labels",
        "queue",
        "split",
    }
    assert "toy" not in index.read_text()
    assert facts[0]["split"] == "check" and facts[1]["split"] == "tune"
    assert facts[1]["queue"] == ["pt2", "triage"]

    rows = [
        json.loads(line) for line in (cache / realindex.BACKTEST_INPUT).read_text().splitlines()
    ]
    assert rows[0]["title"] == "compile fails on a toy model"
    assert "cc @" not in rows[0]["body"] and "Graph break" in rows[0]["body"]
    assert "oncall: pt2" not in rows[0]["body"]
    assert rows[0]["comments"][0]["body"] == "Try fullgraph=False."
    assert rows[0]["labels"] == [{"name": "module: dynamo"}, {"name": "oncall: pt2"}]


def test_rebuilding_keeps_the_recorded_facts_and_adds_only_new_issues(tmp_path):
    cache, index = tmp_path / "cache", tmp_path / "index.jsonl"
    write_answer(cache, "a", excerpt(number=1002))
    call_command(
        "build_real_index", "--add-new", "--index", index, "--cache", cache, stdout=StringIO()
    )
    recorded = json.loads(index.read_text()) | {"split": "check"}
    index.write_text(json.dumps(recorded) + "\n")
    write_answer(cache, "b", excerpt(number=1004))

    out = StringIO()
    call_command("build_real_index", "--add-new", "--index", index, "--cache", cache, stdout=out)

    rows = [json.loads(line) for line in index.read_text().splitlines()]
    assert [(row["number"], row["split"]) for row in rows] == [(1002, "check"), (1004, "tune")]
    assert "1 issues added" in out.getvalue()


def test_without_an_index_the_command_says_what_to_run(tmp_path):
    with pytest.raises(CommandError, match="--add-new"):
        call_command("build_real_index", "--index", tmp_path / "none.jsonl", "--cache", tmp_path)


def test_an_indexed_issue_missing_from_the_cache_is_counted(tmp_path):
    cache, index = tmp_path / "cache", tmp_path / "index.jsonl"
    write_answer(cache, "a", excerpt(number=1002))
    call_command(
        "build_real_index", "--add-new", "--index", index, "--cache", cache, stdout=StringIO()
    )
    (cache / realindex.SEARCH / "a.json").unlink()
    out = StringIO()
    call_command("build_real_index", "--index", index, "--cache", cache, stdout=out)
    assert "0 issues; 1 indexed issues have no cached text" in out.getvalue()


def seed(standin: GitHubStandIn, number: int, **fields: object) -> None:
    standin.add_issue(
        "pytorch/pytorch",
        {
            "number": number,
            "title": f"made-up issue {number}",
            "body": "A compile failure.\ncc @someone",
            "labels": ["oncall: pt2", "module: inductor"],
            "created_at": "2025-02-03T04:05:06Z",
            "comments": [{"body": "Does aot_eager work?", "user": "helper"}],
        }
        | fields,
    )


def write_index(path: Path, *numbers: int) -> None:
    path.write_text(
        "".join(
            json.dumps({"number": n, "created_at": "2025-02-03", "state": "open", "labels": []})
            + "\n"
            for n in numbers
        )
    )


@pytest.mark.django_db
def test_fetch_issues_fills_the_cache_through_the_github_module(standin, tmp_path):
    seed(standin, 7)
    seed(standin, 8, comments=[])
    write_index(tmp_path / "index.jsonl", 7, 8, 9)
    out, err = StringIO(), StringIO()

    call_command(
        "fetch_issues", tmp_path / "index.jsonl", "--cache", tmp_path, stdout=out, stderr=err
    )

    assert "2 fetched, 0 already cached, 1 failed" in out.getvalue()
    assert "#9" in err.getvalue()
    stored = json.loads((tmp_path / "github" / "7.json").read_text())
    assert set(stored["issue"]["labels"]) == {"oncall: pt2", "module: inductor"}
    assert [c["body"] for c in stored["comments"]] == ["Does aot_eager work?"]
    # GitHub's whole answer wins over search excerpts of the same issue.
    cached = realindex.read_cache(tmp_path)
    assert cached[7].source == "github" and cached[7].created == date(2025, 2, 3)
    assert cached[7].comments()[0][1].text == "Does aot_eager work?"

    standin.reset_log()
    call_command(
        "fetch_issues", tmp_path / "index.jsonl", "--cache", tmp_path, stdout=out, stderr=err
    )
    assert "0 fetched, 2 already cached" in out.getvalue()
    assert not [r for r in standin.requests if "/issues/7" in r.path]


@pytest.mark.django_db
def test_fetch_issues_waits_out_a_rate_limit_and_goes_on(standin, tmp_path):
    seed(standin, 7)
    write_index(tmp_path / "index.jsonl", 7)
    standin.inject("GET", r"/repos/pytorch/pytorch/issues/7$", 403, retry_after=0)
    err = StringIO()

    call_command(
        "fetch_issues", tmp_path / "index.jsonl", "--cache", tmp_path, stdout=StringIO(), stderr=err
    )

    assert "rate limit" in err.getvalue()
    assert (tmp_path / "github" / "7.json").is_file()


@pytest.mark.django_db
def test_fetch_issues_stops_rather_than_sleep_past_its_limit(standin, tmp_path):
    seed(standin, 7)
    write_index(tmp_path / "index.jsonl", 7)
    standin.inject("GET", r"/repos/pytorch/pytorch/issues/7$", 403, retry_after=7200)

    with pytest.raises(CommandError, match="run again later"):
        call_command(
            "fetch_issues", tmp_path / "index.jsonl", "--cache", tmp_path, "--max-wait", "60"
        )
    assert not (tmp_path / "github" / "7.json").exists()
