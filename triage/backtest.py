"""Scoring a rubric against issues whose right labels are known.

The labels a proposal would leave on an issue are compared with the labels humans left, both
closed under the label implications GitHub automation applies, and both cut down to the
queue's vocabulary: a rubric is only judged on what it may propose.
"""

from __future__ import annotations

import functools
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from triage import ingest, proposing
from triage.models import Decision, Proposal, Queue
from triage.rubric.engine import Draft, IssueInput
from triage.rubric.loader import RUBRICS_DIR, Rubric

if TYPE_CHECKING:
    from pathlib import Path

IMPLICATIONS = RUBRICS_DIR / "label-implications.json"
WORST_MISSES = 15
# "" is a file without splits; a split file reports the issues tuned on first.
SPLIT_ORDER = ("", "tune", "check")

Proposer = Callable[[Rubric, IssueInput], Draft]


@functools.cache
def implication_rules() -> tuple[tuple[frozenset[str], tuple[str, ...]], ...]:
    data = json.loads(IMPLICATIONS.read_text())
    return tuple((frozenset(rule["any"]), tuple(rule["then"])) for rule in data["rules"])


def closure(labels: Iterable[str]) -> set[str]:
    closed = set(labels)
    changed = True
    while changed:
        changed = False
        for trigger, implied in implication_rules():
            if trigger & closed and not closed.issuperset(implied):
                closed.update(implied)
                changed = True
    return closed


def escalated(labels: Iterable[str]) -> set[str]:
    """Final labels, with `high priority` read as a right escalation.

    The rubrics escalate with `triage review` instead of applying `high priority`; the meeting
    then applies `high priority` and takes `triage review` off. So an issue that ends with
    `high priority` is one on which proposing `triage review` was right.
    """
    labels = set(labels)
    if "high priority" in labels:
        labels.add("triage review")
    return labels


@dataclass(frozen=True)
class Case:
    issue: IssueInput
    visible: frozenset[str]  # what the proposer sees: the labels that put it in the queue
    truth: frozenset[str]  # what humans left on it
    # The labels in use when the issue was filed (first seen on or before that day in the file);
    # others, and labels never seen in the file, are neither right nor wrong on it. None: all.
    in_use: frozenset[str] | None = None
    split: str = ""


@dataclass
class Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "f1": round(self.f1, 4),
            "support": self.tp + self.fn,
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
        }


@dataclass
class Report:
    queue: str
    rubric_version: str
    proposer: str
    issues: int = 0
    labels: dict[str, Counts] = field(default_factory=lambda: defaultdict(Counts))
    tiers: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    rules: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    per_issue: list[dict[str, Any]] = field(default_factory=list)
    usage: Counter[str] = field(default_factory=Counter)
    cost_usd: Decimal = Decimal(0)
    # Labels of the vocabulary that no issue was scored on: the file never uses them.
    unscored: set[str] = field(default_factory=set)

    def micro(self) -> Counts:
        total = Counts()
        for counts in self.labels.values():
            total.tp += counts.tp
            total.fp += counts.fp
            total.fn += counts.fn
        return total

    def macro(self) -> dict[str, float]:
        scored = [c for c in self.labels.values() if c.tp + c.fp + c.fn]
        if not scored:
            return {"precision": 0.0, "recall": 0.0, "f1": 0.0}
        return {
            "precision": round(sum(c.precision for c in scored) / len(scored), 4),
            "recall": round(sum(c.recall for c in scored) / len(scored), 4),
            "f1": round(sum(c.f1 for c in scored) / len(scored), 4),
        }

    def tier_summary(self) -> dict[str, dict[str, float | int]]:
        summary: dict[str, dict[str, float | int]] = {}
        for tier in ("high", "medium", "low"):
            counts = self.tiers.get(tier, Counter())
            changes = counts["right_changes"] + counts["wrong_changes"]
            summary[tier] = {
                "issues": counts["issues"],
                "coverage": round(counts["issues"] / self.issues, 4) if self.issues else 0.0,
                # Of the label changes proposed at this tier, how many humans also made.
                "precision": round(counts["right_changes"] / changes, 4) if changes else 0.0,
                # Issues whose proposal was exactly what humans did: one key press.
                "exact": round(counts["exact"] / counts["issues"], 4) if counts["issues"] else 0.0,
            }
        return summary

    def worst(self) -> list[dict[str, Any]]:
        missed = [entry for entry in self.per_issue if entry["missing"] or entry["extra"]]
        missed.sort(key=lambda e: (-(len(e["missing"]) + len(e["extra"])), e["number"]))
        return missed[:WORST_MISSES]

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "rubric_version": self.rubric_version,
            "proposer": self.proposer,
            "issues": self.issues,
            "micro": {
                k: v
                for k, v in self.micro().as_dict().items()
                if k in ("precision", "recall", "f1")
            },
            "macro": self.macro(),
            "labels": {name: c.as_dict() for name, c in sorted(self.labels.items())},
            "tiers": self.tier_summary(),
            "rules": {
                rule: {"fired": c["fired"], "right": c["right"], "wrong": c["wrong"]}
                for rule, c in sorted(self.rules.items())
            },
            "unscored_labels": sorted(self.unscored),
            "worst_misses": self.worst(),
            "per_issue": self.per_issue,
            "usage": dict(self.usage),
            "cost_usd": float(self.cost_usd),
        }


def score(
    cases: Iterable[Case],
    rubric: Rubric,
    proposer: Proposer,
    proposer_name: str,
    skip: frozenset[str] = frozenset(),
) -> Report:
    """The proposer's answers against the truth; labels in `skip` are left out of every figure."""
    report = Report(queue=rubric.name, rubric_version=rubric.version, proposer=proposer_name)
    vocabulary = rubric.vocabulary.allowed - skip
    rules = {rule.id: rule for rule in rubric.rules}
    report.unscored = set(vocabulary)
    for case in cases:
        draft = proposer(rubric, case.issue)
        scored = vocabulary if case.in_use is None else vocabulary & case.in_use
        report.unscored -= scored
        truth = closure(escalated(case.truth)) & scored
        predicted = closure((case.visible | set(draft.add)) - set(draft.remove)) & scored
        missing = sorted(truth - predicted)
        extra = sorted(predicted - truth)
        for label in (predicted | truth) - (case.visible & predicted & truth):
            counts = report.labels[label]
            if label in predicted and label in truth:
                counts.tp += 1
            elif label in predicted:
                counts.fp += 1
            else:
                counts.fn += 1
        tier = report.tiers[draft.tier]
        tier["issues"] += 1
        tier["exact"] += not missing and not extra
        for label in draft.add:
            if label in scored:
                tier["right_changes" if label in truth else "wrong_changes"] += 1
        for label in draft.remove:
            if label in scored:
                tier["right_changes" if label not in truth else "wrong_changes"] += 1
        for rule_id in draft.rules_fired:
            rule = rules.get(rule_id)
            outcome = report.rules[rule_id]
            outcome["fired"] += 1
            right = (
                rule is not None
                and all(label in truth for label in rule.add if label in scored)
                and not any(label in truth for label in rule.remove)
            )
            outcome["right" if right else "wrong"] += 1
        report.issues += 1
        entry: dict[str, Any] = {
            "number": case.issue.number,
            "add": list(draft.add),
            "remove": list(draft.remove),
            "template": draft.template,
            "tier": draft.tier,
            "score": draft.score,
            "rules": list(draft.rules_fired),
            "missing": missing,
            "extra": extra,
        }
        if draft.usage or draft.notice:
            entry |= {
                "proposer": draft.proposer,
                "usage": dict(draft.usage),
                "cost_usd": float(draft.cost_usd) if draft.cost_usd is not None else None,
                "notice": draft.notice,
            }
            for kind, count in draft.usage.items():
                report.usage[kind] += count
            report.cost_usd += draft.cost_usd or 0
        report.per_issue.append(entry)
    return report


class BacktestInputError(ValueError):
    pass


def belongs(raw: dict[str, Any], labels: list[str], queue: Queue) -> bool:
    """Whether a labelled issue was triaged in this queue.

    A "queue" field (one slug, or a list of them) says so outright: needed for issues that were
    redirected away, which no longer carry the queue's labels. Otherwise the final labels,
    closed under the implications, must carry the queue's.
    """
    if "queue" in raw:
        named = raw["queue"]
        return queue.slug in named if isinstance(named, list) else bool(named == queue.slug)
    return set(queue.require_labels) <= closure(labels)


def first_uses(rows: Iterable[tuple[str, list[str]]]) -> dict[str, str]:
    """The day each label was first seen on an issue of the file: labels appear over the years."""
    first: dict[str, str] = {}
    for created_at, labels in rows:
        for label in closure(escalated(labels)):
            if label not in first or created_at < first[label]:
                first[label] = created_at
    return first


def _read_rows(path: Path) -> list[tuple[dict[str, Any], ingest.IssueFields]]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                rows.append((raw, ingest.parse(raw)))
            except (json.JSONDecodeError, ingest.IssueFormatError) as exc:
                raise BacktestInputError(f"{path}:{number}: {exc}") from None
    return rows


def cases_from_file(path: Path, queue: Queue) -> Iterator[Case]:
    """Issues carrying their final labels, shown to the proposer with only the queue's labels.

    An "intake_labels" list, where present, says what the issue carried when it entered the
    queue (an existing sub-oncall, say): the proposer is shown that instead. A label is scored
    only on issues created on or after the day it first appears in the file (labels come and go
    over the years: the distributed sub-oncalls came in 2026), and never where the file does not
    use it at all. A "split" field (tune or check) is carried to the report.
    """
    queue_labels = frozenset(queue.require_labels)
    rows = _read_rows(path)
    first = first_uses((fields.created_at.date().isoformat(), fields.labels) for _, fields in rows)
    for raw, fields in rows:
        if not belongs(raw, fields.labels, queue):
            continue
        intake = raw.get("intake_labels")
        visible = frozenset(intake) if isinstance(intake, list) else queue_labels
        created = fields.created_at.date().isoformat()
        split = raw.get("split", "")
        if split not in SPLIT_ORDER:
            raise BacktestInputError(f"{path}: issue {fields.number}: unknown split {split!r}")
        yield Case(
            issue=IssueInput(
                number=fields.number,
                title=fields.title,
                body=fields.body,
                labels=tuple(sorted(visible)),
                comments=tuple((c["id"], c["body"]) for c in fields.comments or []),
            ),
            visible=visible,
            truth=frozenset(fields.labels),
            in_use=frozenset(label for label, day in first.items() if day <= created),
            split=split,
        )


def cases_from_history(queue: Queue) -> Iterator[Case]:
    """What oncalls decided in the console: the labels they approved are the truth.

    A rejection counts as "nothing should change": the reviewer said the proposal was wrong and
    approved no other change. The issue's text is the one stored now.
    """
    latest: dict[int, Decision] = {}
    decisions = (
        Decision.objects.filter(proposal__queue=queue)
        .exclude(write__state__in=["conflict", "withdrawn"])
        .select_related("proposal__issue")
        .order_by("decided_at", "pk")
    )
    for decision in decisions:
        latest[decision.proposal.issue_id] = decision
    for decision in latest.values():
        yield case_from_decision(decision)


def case_from_decision(decision: Decision) -> Case:
    proposal: Proposal = decision.proposal
    seen = frozenset(proposal.labels_seen)
    truth = (seen | set(decision.add_labels)) - set(decision.remove_labels)
    return Case(
        issue=replace(proposing.issue_input(proposal.issue), labels=tuple(sorted(seen))),
        visible=seen,
        truth=frozenset(truth),
    )


def format_text(report: Report) -> str:
    data = report.as_dict()
    lines = [
        f"Backtest of rubric {data['queue']} {data['rubric_version']} ({data['proposer']}) on {data['issues']} issues",
        "",
        "micro  precision {precision:.3f}  recall {recall:.3f}  F1 {f1:.3f}".format(
            **data["micro"]
        ),
        "macro  precision {precision:.3f}  recall {recall:.3f}  F1 {f1:.3f}".format(
            **data["macro"]
        ),
        "",
        f"{'label':40} {'prec':>6} {'recall':>6} {'F1':>6} {'supp':>5} {'tp':>4} {'fp':>4} {'fn':>4}",
    ]
    for name, c in data["labels"].items():
        lines.append(
            f"{name:40} {c['precision']:6.3f} {c['recall']:6.3f} {c['f1']:6.3f} "
            f"{c['support']:5d} {c['tp']:4d} {c['fp']:4d} {c['fn']:4d}"
        )
    lines += ["", f"{'tier':8} {'issues':>6} {'coverage':>8} {'precision':>9} {'exact':>6}"]
    for tier, t in data["tiers"].items():
        lines.append(
            f"{tier:8} {t['issues']:6d} {t['coverage']:8.3f} {t['precision']:9.3f} {t['exact']:6.3f}"
        )
    lines += ["", f"{'rule':40} {'fired':>5} {'right':>5} {'wrong':>5}"]
    for rule, r in data["rules"].items():
        lines.append(f"{rule:40} {r['fired']:5d} {r['right']:5d} {r['wrong']:5d}")
    if data["usage"]:
        lines += [
            "",
            f"{'issue':>8} {'proposer':10} {'in':>7} {'out':>6} {'c.read':>7} {'c.write':>7} {'cost $':>9}",
        ]
        for entry in data["per_issue"]:
            usage = entry.get("usage") or {}
            cost = entry.get("cost_usd")
            lines.append(
                f"{entry['number']:>8} {entry.get('proposer', 'rules'):10} {usage.get('input', 0):7d} "
                f"{usage.get('output', 0):6d} {usage.get('cache_read', 0):7d} "
                f"{usage.get('cache_write', 0):7d} {cost if cost is not None else '-':>9}"
            )
        total = data["usage"]
        lines.append(
            f"model tokens: {total.get('input', 0)} in, {total.get('output', 0)} out, "
            f"{total.get('cache_read', 0)} cache read, {total.get('cache_write', 0)} cache write; "
            f"cost ${data['cost_usd']:.4f} (${data['cost_usd'] / max(data['issues'], 1):.5f} per issue)"
        )
    if data["unscored_labels"]:
        lines += ["", f"not scored (never used in the file): {', '.join(data['unscored_labels'])}"]
    lines += ["", "worst misses:"]
    for entry in data["worst_misses"]:
        lines.append(
            f"  #{entry['number']}: missing {', '.join(entry['missing']) or '-'}; "
            f"extra {', '.join(entry['extra']) or '-'}"
        )
    return "\n".join(lines)
