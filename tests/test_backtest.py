from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from tests.factories import make_proposal, make_user, raw_issue
from triage import outbox
from triage.backtest import closure

pytestmark = pytest.mark.django_db

GRAPH_BREAK = "```\ntorch._dynamo.exc.Unsupported: call_method\n```\n```python\nimport torch\n```"
CPU_ONLY = "aot_eager: passes\ninductor: fails\nOnly on CPU.\n```python\nimport torch\n```"


def labelled(number, body, labels, queue="pt2", title="A bug"):
    return raw_issue(number, title=title, body=body, labels=labels) | {"queue": queue}


def run(tmp_path, rows, *args):
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    from io import StringIO

    out = StringIO()
    call_command("backtest", "--queue", "pt2", str(path), *args, stdout=out)
    return out.getvalue()


def test_json_report_scores_labels_tiers_rules_and_every_issue(tmp_path):
    rows = [
        # Right: the graph break is Dynamo's.
        labelled(1, GRAPH_BREAK, ["oncall: pt2", "module: dynamo", "triaged"]),
        # Wrong: humans said dynamic shapes.
        labelled(2, GRAPH_BREAK, ["oncall: pt2", "module: dynamic shapes"]),
        # Handed to the CPU inductor oncall, which keeps oncall: pt2 beside it.
        labelled(
            3,
            CPU_ONLY,
            ["oncall: pt2", "oncall: cpu inductor", "triaged"],
            title="[CPU] layernorm fails",
        ),
        # Another queue's issue is left out.
        labelled(4, GRAPH_BREAK, ["oncall: distributed"], queue="distributed"),
    ]
    report = json.loads(run(tmp_path, rows, "--json"))

    assert report["issues"] == 3
    assert [entry["number"] for entry in report["per_issue"]] == [1, 2, 3]
    assert set(report["per_issue"][0]) >= {"number", "add", "remove", "template", "tier", "score"}
    dynamo = report["labels"]["module: dynamo"]
    assert (dynamo["tp"], dynamo["fp"], dynamo["fn"]) == (1, 1, 0)
    assert report["labels"]["module: dynamic shapes"]["fn"] == 1
    # Keeping oncall: pt2, which every issue came in with and kept, is not scored at all.
    assert "oncall: pt2" not in report["labels"]
    assert report["labels"]["oncall: cpu inductor"]["tp"] == 1
    assert report["rules"]["pt2-graph-break"] == {"fired": 2, "right": 1, "wrong": 1}
    assert report["rules"]["pt2-cpu-inductor-redirect"]["right"] == 1
    micro = report["micro"]
    # Right: dynamo and triaged on #1, the redirect and triaged on #3; wrong: both on #2.
    assert micro["precision"] == pytest.approx(4 / 6, abs=1e-3)
    assert set(report["tiers"]) == {"high", "medium", "low"}
    assert sum(t["issues"] for t in report["tiers"].values()) == 3
    assert report["worst_misses"][0]["number"] == 2


def test_text_report_has_every_table(tmp_path):
    text = run(tmp_path, [labelled(1, GRAPH_BREAK, ["oncall: pt2", "module: dynamo"])])
    for heading in ("micro", "macro", "label", "tier", "rule", "worst misses"):
        assert heading in text


def test_labels_are_compared_closed_under_implications(tmp_path):
    # Humans applied module: aotdispatch; automation then added module: pt2-dispatcher.
    assert "module: pt2-dispatcher" in closure({"module: aotdispatch"})
    body = 'backend="eager" works, backend="aot_eager" fails\n```python\nimport torch\n```'
    report = json.loads(
        run(tmp_path, [labelled(1, body, ["oncall: pt2", "module: aotdispatch"])], "--json")
    )
    assert report["labels"]["module: pt2-dispatcher"]["tp"] == 1


def test_a_malformed_line_is_reported(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"number": 1}\n')
    with pytest.raises(CommandError, match=r"bad\.jsonl:1: missing field"):
        call_command("backtest", "--queue", "pt2", str(path))


def test_from_history_scores_the_rubric_against_console_decisions(capsys):
    oncall = make_user("oncall", oncall=True)
    kept = make_proposal(number=10, body=GRAPH_BREAK)
    changed = make_proposal(number=11, body=GRAPH_BREAK)
    outbox.decide(
        kept,
        kind="accept",
        user=oncall,
        add_labels=list(kept.add_labels),
        remove_labels=[],
        comment_body="",
        close=False,
        note="",
    )
    outbox.decide(
        changed,
        kind="edit",
        user=oncall,
        add_labels=["module: dynamic shapes"],
        remove_labels=[],
        comment_body="",
        close=False,
        note="it is dynamic shapes",
    )

    call_command("backtest", "--queue", "pt2", "--from-history", "--json")
    report = json.loads(capsys.readouterr().out)

    assert report["issues"] == 2
    assert report["labels"]["module: dynamo"]["tp"] == 1
    assert report["labels"]["module: dynamo"]["fp"] == 1
    assert report["labels"]["module: dynamic shapes"]["fn"] == 1


def test_file_and_history_are_exclusive(tmp_path):
    with pytest.raises(CommandError, match="either FILE or --from-history"):
        call_command("backtest", "--queue", "pt2")


def test_a_label_is_scored_only_on_issues_created_after_its_first_use(tmp_path):
    from datetime import UTC, datetime

    early = datetime(2021, 1, 4, tzinfo=UTC)
    late = datetime(2024, 6, 3, tzinfo=UTC)
    rows = [
        # module: dynamo did not exist yet in 2021: proposing it there is neither right nor wrong.
        raw_issue(1, body=GRAPH_BREAK, labels=["oncall: pt2"], created=early) | {"queue": "pt2"},
        raw_issue(2, body=GRAPH_BREAK, labels=["oncall: pt2", "module: dynamo"], created=late)
        | {"queue": "pt2"},
        raw_issue(3, body=GRAPH_BREAK, labels=["oncall: pt2"], created=late) | {"queue": "pt2"},
    ]
    report = json.loads(run(tmp_path, rows, "--json"))

    dynamo = report["labels"]["module: dynamo"]
    assert (dynamo["tp"], dynamo["fp"]) == (1, 1)


def test_queue_membership_follows_the_implications_without_a_queue_field(tmp_path):
    # module: inductor implies oncall: pt2, so the issue was in the pt2 queue.
    rows = [raw_issue(1, body=GRAPH_BREAK, labels=["module: inductor", "triaged"])]
    report = json.loads(run(tmp_path, rows, "--json"))
    assert report["issues"] == 1


def test_a_queue_list_names_every_queue_an_issue_was_in(tmp_path):
    rows = [
        raw_issue(1, body=GRAPH_BREAK, labels=["oncall: pt2"]) | {"queue": ["pt2", "triage"]},
        raw_issue(2, body=GRAPH_BREAK, labels=["oncall: pt2"]) | {"queue": ["triage"]},
    ]
    assert json.loads(run(tmp_path, rows, "--json"))["issues"] == 1


def test_a_split_file_reports_tune_and_check_apart(tmp_path):
    rows = [
        labelled(1, GRAPH_BREAK, ["oncall: pt2", "module: dynamo"]) | {"split": "tune"},
        labelled(2, GRAPH_BREAK, ["oncall: pt2", "module: dynamic shapes"]) | {"split": "check"},
        labelled(3, GRAPH_BREAK, ["oncall: pt2", "module: dynamo"]) | {"split": "check"},
    ]
    report = json.loads(run(tmp_path, rows, "--json"))

    assert list(report["splits"]) == ["tune", "check"]
    tune, check = report["splits"]["tune"], report["splits"]["check"]
    assert (tune["issues"], check["issues"]) == (1, 2)
    assert tune["labels"]["module: dynamo"]["fp"] == 0
    assert check["labels"]["module: dynamo"]["fp"] == 1
    assert set(check["tiers"]) == {"high", "medium", "low"}
    text = run(tmp_path, rows)
    assert "== split: tune ==" in text and "== split: check ==" in text


def test_an_unknown_split_is_refused(tmp_path):
    rows = [labelled(1, GRAPH_BREAK, ["oncall: pt2"]) | {"split": "train"}]
    with pytest.raises(CommandError, match="unknown split 'train'"):
        run(tmp_path, rows)


def test_high_priority_in_the_final_labels_makes_an_escalation_right(tmp_path):
    crash = "It segfaults.\nSegmentation fault (core dumped)\n```python\nimport torch\n```"
    rows = [
        labelled(1, crash, ["oncall: pt2", "high priority"]),
        labelled(2, crash, ["oncall: pt2"]),
    ]
    review = json.loads(run(tmp_path, rows, "--json"))["labels"]["triage review"]
    assert (review["tp"], review["fp"]) == (1, 1)


def test_a_label_the_file_never_uses_is_not_scored_and_the_report_says_so(tmp_path):
    # Nobody in the file ever applied module: dynamo: proposing it is neither right nor wrong.
    rows = [labelled(1, GRAPH_BREAK, ["oncall: pt2", "triaged"])]
    report = json.loads(run(tmp_path, rows, "--json"))

    assert "module: dynamo" not in report["labels"]
    assert "module: dynamo" in report["unscored_labels"]
    assert report["labels"]["triaged"]["tp"] == 1
    assert "not scored (never used in the file): " in run(tmp_path, rows)


def test_a_skipped_label_is_left_out_of_every_figure(tmp_path):
    rows = [labelled(1, GRAPH_BREAK, ["oncall: pt2", "module: dynamic shapes"])]
    report = json.loads(run(tmp_path, rows, "--json", "--skip-label", "triaged"))

    assert "triaged" not in report["labels"]
    # Only module: dynamo (wrong) and module: dynamic shapes (missed) are left.
    assert report["micro"]["precision"] == 0.0
    assert report["tiers"]["medium"]["precision"] + report["tiers"]["low"]["precision"] == 0.0
