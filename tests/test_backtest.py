from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from tests.factories import make_proposal, make_user, raw_issue
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
        # A redirect: the final labels no longer carry oncall: pt2.
        labelled(3, CPU_ONLY, ["oncall: cpu inductor"], title="[CPU] layernorm fails"),
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
    # Removing oncall: pt2 on #3 was right; keeping it on #1 and #2 is not scored at all.
    assert report["labels"].get("oncall: pt2", {"fp": 0})["fp"] == 0
    assert report["labels"]["oncall: cpu inductor"]["tp"] == 1
    assert report["rules"]["pt2-graph-break"] == {"fired": 2, "right": 1, "wrong": 1}
    assert report["rules"]["pt2-cpu-inductor-redirect"]["right"] == 1
    micro = report["micro"]
    # Right: dynamo and triaged on #1, the redirect on #3; wrong: dynamo and triaged on #2.
    assert micro["precision"] == pytest.approx(3 / 5, abs=1e-3)
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
    kept.decide(
        kind="accept",
        user=oncall,
        add_labels=list(kept.add_labels),
        remove_labels=[],
        comment_body="",
        close=False,
        note="",
    )
    changed.decide(
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
