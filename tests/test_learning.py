"""The learned proposer: training, versions, the guard on its labels, beside the rules."""

from __future__ import annotations

import json
from dataclasses import replace
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.factories import make_issue, make_user, queue
from triage import outbox, proposing
from triage.learning import proposer, store, training
from triage.learning.proposer import Learned
from triage.models import Decision, Issue, LearnedModel, Proposal, Queue
from triage.rubric import engine, loader
from triage.tasks import repropose_stale, train_model

pytestmark = pytest.mark.django_db

# Made-up words no rule knows: whatever is proposed for them, the history learned.
KINDS = {
    "module: cuda graphs": ("zorblax widget", "The zorblax widget frobnicates when replayed"),
    "module: flex attention": ("quibble sprocket", "A quibble sprocket wobbles on every call"),
    "module: compile ux": ("snorfle gadget", "The snorfle gadget prints a confusing message"),
}


def text_of(label, i):
    title, body = KINDS[label]
    return f"{title} {i} misbehaves", f"{body} (case {i}).\n\nIt happens each time, sadly."


def examples(per_kind=12, start=1, extra=None):
    made = []
    number = start
    for label in KINDS:
        for i in range(per_kind):
            title, body = text_of(label, i)
            labels = {"oncall: pt2", label, *(extra or {}).get(label, ())}
            issue = engine.IssueInput(number, title, body, ("oncall: pt2",))
            made.append(training.Example(issue, frozenset(labels)))
            number += 1
    return made


def raw(example, split=""):
    issue = example.issue
    row = {
        "number": issue.number,
        "title": issue.title,
        "body": issue.body,
        "state": "closed",
        "labels": [{"name": label} for label in sorted(example.labels)],
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-02T00:00:00Z",
        "queue": "pt2",
    }
    return row | ({"split": split} if split else {})


def proposed(issue, q):
    proposal = proposing.propose(issue, q)
    assert proposal is not None
    return proposal


@pytest.fixture
def pt2():
    return queue("pt2")


@pytest.fixture
def trained(pt2):
    row, new = store.train(pt2, examples(), "test")
    assert new
    return row


def test_a_model_learns_only_the_labels_of_the_queues_vocabulary(pt2):
    labelled = examples(extra={"module: flex attention": ("module: nn", "high priority")})
    model = training.train(labelled, loader.load("pt2"))
    assert set(KINDS) <= set(model.labels)
    assert "module: nn" not in model.labels  # not in the pt2 vocabulary
    assert "high priority" not in model.labels  # a human decides that
    # Every issue carries oncall: pt2: nothing to learn about it.
    assert "oncall: pt2" not in model.labels
    assert model.metrics["micro"]["f1"] > 0.9
    learned = Learned(model)
    title, body = text_of("module: flex attention", 99)
    issue = engine.IssueInput(999, title, body, ("oncall: pt2",))
    [assessment] = proposer.assess(learned, [issue])
    assert assessment.probabilities["module: flex attention"] > 0.5
    assert assessment.probabilities["module: cuda graphs"] < 0.5
    # `high priority` is read as a right escalation, as the backtest reads it.
    assert "triage review" in model.labels
    assert assessment.probabilities["triage review"] > 0.5


def test_too_little_history_trains_nothing(pt2):
    with pytest.raises(training.TrainingError, match="no label has 5 issues"):
        store.train(pt2, examples(per_kind=3), "test")
    assert not LearnedModel.objects.exists()


def test_rules_with_history_adds_the_label_the_rules_left_open_with_its_evidence(trained, pt2):
    pt2.proposer = Queue.Proposer.RULES_HISTORY
    pt2.save()
    title, body = text_of("module: cuda graphs", 77)
    issue = make_issue(title=title, body=body)
    proposal = proposed(issue, pt2)
    assert proposal is not None
    assert "module: cuda graphs" in proposal.add_labels
    assert proposal.proposer == "rules+history"
    assert proposal.learned_model == trained
    assert proposal.proposer_version == f"rules-1+history-{trained.version}"
    assert proposal.learned["added"] == ["module: cuda graphs"]
    [entry] = [e for e in proposal.learned_evidence() if e["label"] == "module: cuda graphs"]
    # The proposal is as sure as the history, but what the history adds alone is never high.
    cap = proposer.HISTORY_CAP * loader.load("pt2").high_tier
    assert proposal.score == pytest.approx(min(entry["probability"], cap), abs=0.001)
    assert proposal.tier != "high"
    marked = [term for term in entry["terms"] if term["evidence"]]
    assert marked, entry
    for term in marked:
        text = {"title": issue.title, "body": issue.body}[term["source"]]
        assert text[term["start"] : term["end"]] == term["evidence"]
        assert term["evidence"].lower() in {
            "zorblax",
            "widget",
            "zorblax widget",
            "frobnicates",
            "replayed",
        }
    # The most similar training issues are the twelve zorblax ones.
    assert len(entry["neighbours"]) == 5
    assert entry["carrying"] == entry["neighbours"]


def test_a_queue_on_rules_with_history_without_a_model_proposes_with_the_rules_and_says_so(pt2):
    assert pt2.proposer == Queue.Proposer.RULES_HISTORY  # the default
    title, body = text_of("module: cuda graphs", 1)
    issue = make_issue(title=title, body=body)
    proposal = proposed(issue, pt2)
    assert proposal.proposer == "rules"
    assert proposal.learned_model is None
    assert "No model is trained for this queue yet" in proposal.notice
    assert "module: cuda graphs" not in proposal.add_labels
    # Once a model is trained the proposal is stale: the issue is proposed again with it.
    store.train(pt2, examples(), "test")
    assert proposing.queues_to_propose(issue) == [pt2]
    fresh = proposed(issue, pt2)
    assert fresh.pk != proposal.pk
    assert fresh.notice == ""
    assert "module: cuda graphs" in fresh.add_labels


def test_retraining_makes_a_new_version_and_pending_proposals_follow_it(
    trained, pt2, django_capture_on_commit_callbacks
):
    again, new = store.train(pt2, examples(), "test")
    assert (again, new) == (trained, False)  # the same examples: no new version
    title, body = text_of("module: compile ux", 5)
    issue = make_issue(title=title, body=body)
    first = proposed(issue, pt2)
    assert first.learned_model == trained
    second, new = store.train(pt2, examples(per_kind=13), "test")
    assert new
    assert second.version == trained.version + 1
    with django_capture_on_commit_callbacks(execute=True):
        repropose_stale()
    current = Proposal.objects.get(issue=issue, queue=pt2, status=Proposal.Status.PENDING)
    assert current.learned_model == second
    assert current.proposer_version == f"rules-1+history-{second.version}"
    first.refresh_from_db()
    assert first.status == Proposal.Status.SUPERSEDED
    assert first.learned_model == trained  # a proposal keeps naming the model it used


def test_old_versions_keep_their_row_but_not_their_fitted_model(pt2):
    rows = [
        store.train(pt2, examples(per_kind=12 + n), "test")[0]
        for n in range(store.VERSIONS_KEPT + 1)
    ]
    rows[0].refresh_from_db()
    assert bytes(rows[0].fitted) == b""
    assert all(bytes(LearnedModel.objects.get(pk=r.pk).fitted) for r in rows[1:])


def _rules_draft(rubric, add, score=0.85):
    return engine.Draft(
        proposer="rules",
        proposer_version="1",
        rubric_version=rubric.version,
        add=tuple(add),
        remove=(),
        template="",
        comment="",
        close=False,
        score=score,
        tier=rubric.tier(score),
        rationale="A rule fired.",
        citations=(),
        rules_fired=("some-rule",),
    )


@pytest.fixture
def learned():
    return Learned(training.train(examples(), loader.load("pt2")), version=1)


def _assessment(learned, label, number=500):
    title, body = text_of(label, number)
    return proposer.assess(learned, [engine.IssueInput(number, title, body, ("oncall: pt2",))])[0]


def test_the_guard_drops_a_learned_label_the_rubric_forbids_or_lacks(learned):
    rubric = loader.load("pt2")
    assessment = _assessment(learned, "module: flex attention")
    forbidding = replace(
        rubric,
        vocabulary=replace(
            rubric.vocabulary, forbidden=rubric.vocabulary.forbidden | {"module: flex attention"}
        ),
    )
    lacking = replace(
        rubric,
        vocabulary=replace(
            rubric.vocabulary, allowed=rubric.vocabulary.allowed - {"module: flex attention"}
        ),
    )
    for changed, reason in ((forbidding, "forbidden"), (lacking, "not in the queue's vocabulary")):
        for draft in (
            proposer.learned_alone(changed, learned, assessment),
            proposer.beside_rules(changed, learned, assessment, _rules_draft(changed, [])),
        ):
            assert "module: flex attention" not in draft.add
            [dropped] = [d for d in draft.dropped if d.label == "module: flex attention"]
            assert reason in dropped.reason
    # With the rubric as it is, the same label goes through.
    assert "module: flex attention" in proposer.learned_alone(rubric, learned, assessment).add


def test_a_disagreement_with_the_rules_is_said_and_lowers_the_confidence(learned, monkeypatch):
    rubric = loader.load("pt2")
    assessment = _assessment(learned, "module: compile ux")
    agreed = proposer.beside_rules(
        rubric, learned, assessment, _rules_draft(rubric, ["module: compile ux"])
    )
    assert agreed.learned["disagreements"] == []
    assert agreed.score == 0.85
    rules = _rules_draft(rubric, ["module: cuda graphs"])
    assert assessment.probabilities["module: cuda graphs"] < proposer.VETO_BELOW
    # So sure the rules are wrong, the history leaves their label out, and says so.
    vetoed = proposer.beside_rules(rubric, learned, assessment, rules)
    assert "module: cuda graphs" not in vetoed.add
    assert "so it is left out" in vetoed.learned["disagreements"][0]["why"]
    monkeypatch.setattr(proposer, "VETO_BELOW", 0.0)
    disputed = proposer.beside_rules(rubric, learned, assessment, rules)
    # Otherwise the rules' label stays; the history's own goes beside it; both say they disagree.
    assert disputed.add[0] == "module: cuda graphs"
    assert "module: compile ux" in disputed.add
    [disagreement] = disputed.learned["disagreements"]
    assert disagreement["label"] == "module: cuda graphs"
    assert "disagree" in disputed.rationale
    undisputed = min(
        0.85,
        assessment.probabilities["module: compile ux"],
        proposer.HISTORY_CAP * rubric.high_tier,
    )
    assert disputed.score == pytest.approx(undisputed * proposer.DISAGREEMENT_FACTOR, abs=0.001)


def test_the_issue_page_shows_the_history_evidence(client, trained, pt2):
    client.force_login(make_user("oncall", oncall=True))
    title, body = text_of("module: cuda graphs", 3)
    proposal = proposed(make_issue(title=title, body=body), pt2)
    page = client.get(f"/p/{proposal.pk}/").content.decode()
    assert 'id="learned-evidence"' in page
    assert f"model v{trained.version}" in page
    assert "most similar past issues carry <code>module: cuda graphs</code>" in page
    assert "<mark>" in page.split('id="learned-evidence"')[1]


def labelled(issue: Issue) -> Issue:
    """As the history sync stores a closed issue."""
    Issue.objects.filter(pk=issue.pk).update(labelled_at=timezone.now())
    return issue


def test_database_examples_are_closed_issues_of_the_queue_and_approved_decisions(pt2):
    closed = labelled(make_issue(state="closed", labels=["oncall: pt2", "module: inductor"]))
    labelled(make_issue(state="closed", labels=["oncall: jit"]))  # never in the pt2 queue
    make_issue(state="closed", labels=["oncall: pt2", "module: dynamo"])  # not read as history
    oncall = make_user("oncall", oncall=True)
    approved = make_issue(labels=["oncall: pt2", "needs reproduction"])
    proposal = proposed(approved, pt2)
    decision = proposal.decide(
        kind=Decision.Kind.EDIT,
        user=oncall,
        add_labels=["module: dynamo"],
        remove_labels=["needs reproduction"],
        comment_body="",
        close=False,
        note="",
    )
    assert decision is not None
    outbox.for_decision(decision)
    rejected = make_issue(labels=["oncall: pt2"])
    proposed(rejected, pt2).decide(
        kind=Decision.Kind.REJECT,
        user=oncall,
        add_labels=[],
        remove_labels=[],
        comment_body="",
        close=False,
        note="wrong",
    )
    found = {example.issue.number: example.labels for example in store.examples(pt2)}
    assert found == {
        closed.number: {"oncall: pt2", "module: inductor"},
        approved.number: {"oncall: pt2", "module: dynamo"},
    }


def test_train_model_command_and_beat_task(tmp_path, pt2):
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(raw(e)) + "\n" for e in examples()))
    out = StringIO()
    call_command("train_model", "--queue", "pt2", "--file", str(path), stdout=out)
    assert "pt2: model v1 trained on 36 issues" in out.getvalue()
    row = LearnedModel.objects.get(queue=pt2)
    assert row.source == "labelled.jsonl"
    assert set(KINDS) <= set(row.labels)
    # The beat task learns from the database: nothing closed there yet, so no new version.
    train_model(pt2.pk)
    assert LearnedModel.objects.count() == 1
    with pytest.raises(CommandError, match="no model trained"):
        call_command("train_model", "--queue", "pt2", stdout=StringIO())
    for example in examples():
        labelled(
            make_issue(
                title=example.issue.title,
                body=example.issue.body,
                labels=sorted(example.labels),
                state="closed",
            )
        )
    train_model(pt2.pk)
    latest = LearnedModel.objects.filter(queue=pt2).order_by("-version").first()
    assert latest is not None
    assert (latest.version, latest.source, latest.examples) == (2, "database", 36)


def _write(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_backtest_train_scores_history_and_rules_with_history(tmp_path):
    train = _write(tmp_path, "train.jsonl", [raw(e) for e in examples()])
    test = _write(tmp_path, "test.jsonl", [raw(e) for e in examples(per_kind=4, start=1001)])
    out = StringIO()
    call_command("backtest", "--queue", "pt2", "--train", train, test, "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert result["trained_on"] == 36
    reports = {name: by_split[""] for name, by_split in result["proposers"].items()}
    assert set(reports) == {"rules", "history", "rules+history"}
    # No rule knows these words: the rules miss every module.
    assert reports["rules"]["labels"]["module: cuda graphs"]["tp"] == 0
    assert reports["rules"]["micro"]["f1"] < 0.5
    assert reports["history"]["micro"]["f1"] == 1.0
    assert reports["rules+history"]["micro"]["f1"] == 1.0
    assert reports["history"]["labels"]["module: cuda graphs"]["tp"] == 4
    # The text tables name each proposer and end with the comparison.
    text = StringIO()
    call_command("backtest", "--queue", "pt2", "--train", train, test, stdout=text)
    assert "== rules+history, split: none ==" in text.getvalue()
    assert "trained on 36 issues" in text.getvalue()


def test_backtest_train_leaves_out_issues_it_learned_from(tmp_path):
    rows = [raw(e, split="tune") for e in examples()] + [
        raw(e, split="check") for e in examples(per_kind=4, start=1001)
    ]
    both = _write(tmp_path, "both.jsonl", rows)
    out = StringIO()
    call_command(
        "backtest",
        "--queue",
        "pt2",
        "--train",
        both,
        "--train-split",
        "tune",
        both,
        "--json",
        stdout=out,
    )
    result = json.loads(out.getvalue())
    assert result["note"].startswith("36 issues of FILE were learned from")
    assert set(result["proposers"]["history"]) == {"check"}
    assert result["proposers"]["history"]["check"]["issues"] == 12


def test_backtest_cross_validates_by_issue_number(tmp_path):
    path = _write(tmp_path, "all.jsonl", [raw(e) for e in examples(per_kind=15)])
    out = StringIO()
    call_command("backtest", "--queue", "pt2", "--cv", "3", path, "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert result["cv"] == 3
    assert result["trained_on"] == 30
    history = result["proposers"]["history"][""]
    assert history["issues"] == 45
    assert history["micro"]["f1"] > 0.9
    with pytest.raises(CommandError, match="at least 2 folds"):
        call_command("backtest", "--queue", "pt2", "--cv", "1", path)
