from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from tests.factories import raw_issue
from triage.models import Issue, Proposal

pytestmark = pytest.mark.django_db


@pytest.fixture
def run_import(django_capture_on_commit_callbacks):
    def run(path):
        # Proposals are enqueued on commit, which a test's transaction never does: run them here.
        with django_capture_on_commit_callbacks(execute=True):
            call_command("import_issues", str(path))

    return run


def write_jsonl(path, rows):
    path.write_text(
        "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows)
    )
    return path


def test_import_creates_issues_with_comments_and_proposals(tmp_path, capsys, run_import):
    file = write_jsonl(
        tmp_path / "issues.jsonl",
        [
            raw_issue(1, comments=["Tried backend='aot_eager': passes."]),
            raw_issue(2, labels=["oncall: distributed"], body="FSDP hangs", title="FSDP hang"),
            raw_issue(3, labels=[], title="How do I save a model?", body="how do I save it"),
        ],
    )
    run_import(file)

    assert capsys.readouterr().out.strip() == "3 new, 0 updated, 0 unchanged"
    first = Issue.objects.get(number=1)
    assert first.comments[0]["body"] == "Tried backend='aot_eager': passes."
    assert first.comments[0]["author"] == "maintainer"
    queues = dict(Proposal.objects.values_list("issue__number", "queue__slug"))
    assert queues == {1: "pt2", 2: "distributed", 3: "triage"}


def test_importing_the_same_file_twice_imports_nothing_new(tmp_path, capsys, run_import):
    file = write_jsonl(tmp_path / "issues.jsonl", [raw_issue(1), raw_issue(2)])
    run_import(file)
    capsys.readouterr()
    run_import(file)

    assert capsys.readouterr().out.strip() == "0 new, 0 updated, 2 unchanged"
    assert Issue.objects.count() == 2
    assert Proposal.objects.count() == 2


def test_an_edited_issue_is_updated_and_gets_a_fresh_proposal(tmp_path, capsys, run_import):
    run_import(write_jsonl(tmp_path / "a.jsonl", [raw_issue(1)]))
    edited = raw_issue(1, body="Segmentation fault (core dumped)")
    run_import(write_jsonl(tmp_path / "b.jsonl", [edited]))

    assert capsys.readouterr().out.strip().endswith("0 new, 1 updated, 0 unchanged")
    statuses = list(Proposal.objects.order_by("pk").values_list("status", flat=True))
    assert statuses == [Proposal.Status.SUPERSEDED, Proposal.Status.PENDING]
    assert "triage review" in Proposal.objects.get(status="pending").add_labels


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: not valid JSON"),
        (json.dumps({"title": "no number"}), "line 2: missing field 'number'"),
        (
            json.dumps(raw_issue(5) | {"state": "merged"}),
            "line 2: 'state' must be 'open' or 'closed'",
        ),
        (json.dumps(raw_issue(5) | {"labels": "oncall: pt2"}), "line 2: 'labels' must be a list"),
        (
            json.dumps(raw_issue(5) | {"created_at": "yesterday"}),
            "line 2: 'created_at' must be an ISO",
        ),
        (
            json.dumps(raw_issue(5) | {"comments": [{"body": "x"}]}),
            "line 2: a comment needs an integer",
        ),
        (json.dumps(raw_issue(1)), "line 2: issue #1 already appears on line 1"),
    ],
)
def test_a_malformed_line_is_reported_and_nothing_is_imported(tmp_path, line, message):
    file = write_jsonl(tmp_path / "bad.jsonl", [raw_issue(1), line, raw_issue(3)])
    with pytest.raises(CommandError) as failure:
        call_command("import_issues", str(file))
    assert message in str(failure.value)
    assert "nothing was imported" in str(failure.value)
    assert Issue.objects.count() == 0


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (json.dumps(raw_issue(5) | {"body": "a\x00b"}), "line 2: 'body' holds a NUL character"),
        (json.dumps(raw_issue(5) | {"title": "\ud800"}), "line 2: 'title' holds a lone surrogate"),
        (json.dumps(raw_issue(5) | {"title": "t" * 1001}), "line 2: 'title' is longer than 1000"),
        (
            json.dumps(raw_issue(5) | {"user": {"login": "u" * 101}}),
            "line 2: the author's login is longer than 100",
        ),
        (
            json.dumps(raw_issue(5) | {"html_url": "https://github.com/" + "x" * 500}),
            "line 2: 'html_url' is longer than 500",
        ),
        (json.dumps(raw_issue(5) | {"number": 2**31}), "line 2: 'number' must be an integer"),
        ("[" * 100_000 + "]" * 100_000, "line 2: nested too deeply"),
    ],
)
def test_what_the_database_cannot_hold_is_reported_by_line(tmp_path, line, message):
    file = write_jsonl(tmp_path / "bad.jsonl", [raw_issue(1), line, raw_issue(3)])
    with pytest.raises(CommandError) as failure:
        call_command("import_issues", str(file))
    assert message in str(failure.value)
    assert Issue.objects.count() == 0


def test_invalid_utf8_is_reported_by_line(tmp_path):
    file = tmp_path / "bad.jsonl"
    file.write_bytes(json.dumps(raw_issue(1)).encode() + b"\n" + b'{"title": "\xff\xfe"}\n')
    with pytest.raises(CommandError, match=r"line 2: not valid UTF-8 \(at byte 12\)"):
        call_command("import_issues", str(file))
    assert Issue.objects.count() == 0
