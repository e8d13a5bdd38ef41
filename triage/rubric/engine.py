"""The rule proposer: signals in, a guarded proposal out."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from triage.rubric.signals import Evidence, TextSource, extract

if TYPE_CHECKING:
    from decimal import Decimal

    from triage.rubric.loader import Rubric, Rule

PROPOSER = "rules"
PROPOSER_VERSION = "1"
FORBIDDEN_ALWAYS = "high priority"


@dataclass(frozen=True, slots=True)
class IssueInput:
    number: int
    title: str
    body: str
    labels: tuple[str, ...]
    # (comment id, body)
    comments: tuple[tuple[int, str], ...] = ()

    def sources(self) -> list[TextSource]:
        return [
            TextSource("title", self.title),
            TextSource("body", self.body),
            *(TextSource(f"comment:{cid}", text) for cid, text in self.comments),
        ]


@dataclass(frozen=True, slots=True)
class Citation:
    section: str
    section_title: str
    rule: str
    evidence: str
    source: str
    start: int
    end: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "section_title": self.section_title,
            "rule": self.rule,
            "evidence": self.evidence,
            "source": self.source,
            "start": self.start,
            "end": self.end,
        }


@dataclass(frozen=True, slots=True)
class Dropped:
    label: str
    action: str  # "add", "remove" or "template"
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"label": self.label, "action": self.action, "reason": self.reason}


@dataclass(frozen=True)
class Draft:
    proposer: str
    proposer_version: str
    rubric_version: str
    add: tuple[str, ...]
    remove: tuple[str, ...]
    template: str
    comment: str
    close: bool
    score: float
    tier: str
    rationale: str
    citations: tuple[Citation, ...]
    dropped: tuple[Dropped, ...] = ()
    rules_fired: tuple[str, ...] = field(default=())
    # What a model proposal cost: tokens {"input", "output", "cache_write", "cache_read"}.
    usage: dict[str, int] = field(default_factory=dict)
    latency_ms: int | None = None
    cost_usd: Decimal | None = None
    # Shown to the reviewer: why this proposal is not what the queue's proposer would give.
    notice: str = ""
    # In hybrid mode, the other proposer's answer where the two disagree.
    alternative: dict[str, Any] = field(default_factory=dict)
    # A learned proposer's evidence (`triage.learning.proposer`) and the stored model's id.
    learned: dict[str, Any] = field(default_factory=dict)
    learned_model: int | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "proposer": self.proposer,
            "add": list(self.add),
            "remove": list(self.remove),
            "template": self.template,
            "tier": self.tier,
            "score": self.score,
            "rationale": self.rationale,
        }


def fires(rule: Rule, signals: frozenset[str], labels: frozenset[str]) -> bool:
    if not signals.issuperset(rule.when):
        return False
    if rule.any and signals.isdisjoint(rule.any):
        return False
    if not signals.isdisjoint(rule.unless):
        return False
    if not labels.issuperset(rule.has_labels):
        return False
    if any(labels.isdisjoint(group) for group in rule.has_one_of):
        return False
    return labels.isdisjoint(rule.lacks_labels)


def _evidence_for(rule: Rule, signals: dict[str, list[Evidence]]) -> list[Evidence]:
    evidence = [ev for name in (*rule.when, *rule.any) for ev in signals.get(name, [])[:1]]
    # Keep one quote per signal: the reviewer needs the why, not every occurrence.
    return evidence[:3]


def propose(rubric: Rubric, issue: IssueInput) -> Draft:
    signals = extract(issue.sources())
    labels = frozenset(issue.labels)
    present = frozenset(signals)
    fired: list[Rule] = []
    for rule in rubric.rules:
        if fires(rule, present, labels):
            fired.append(rule)
            if rule.stop:
                break
    suppressed = {label for rule in fired for label in rule.suppress}
    add: list[str] = []
    remove: list[str] = []
    citations: list[Citation] = []
    template = ""
    close = False
    for rule in fired:
        add.extend(label for label in rule.add if label not in add and label not in suppressed)
        remove.extend(label for label in rule.remove if label not in remove)
        if rule.template and not template:
            template = rule.template
        close = close or rule.close
        evidence = _evidence_for(rule, signals)
        for section_id in rule.sections:
            section = rubric.sections[section_id]
            if not evidence:
                citations.append(Citation(section_id, section.title, rule.id, "", "", 0, 0))
            for ev in evidence:
                citations.append(
                    Citation(
                        section_id, section.title, rule.id, ev.text, ev.source, ev.start, ev.end
                    )
                )
    completion = rubric.completion
    completed = (
        completion is not None
        and bool(completion.requires_any.intersection(add))
        and completion.blocked_by.isdisjoint(add)
        and completion.blocked_by.isdisjoint(labels)
    )
    if completion is not None and completed:
        add.extend(label for label in completion.add if label not in add)
        for section_id in completion.sections:
            section = rubric.sections[section_id]
            citations.append(Citation(section_id, section.title, "completion", "", "", 0, 0))
    if fired:
        score = min(rule.confidence for rule in fired)
        if completion is not None and completed:
            score = min(score, completion.confidence)
        rationale = " ".join(rule.rationale for rule in fired if rule.rationale)
    else:
        score = rubric.no_rule_score
        rationale = "No rule of this rubric matched: read the issue and decide by hand."
    comment = rubric.templates[template].body.strip() if template else ""
    draft = Draft(
        proposer=PROPOSER,
        proposer_version=PROPOSER_VERSION,
        rubric_version=rubric.version,
        add=tuple(add),
        remove=tuple(remove),
        template=template,
        comment=comment,
        close=close,
        score=round(score, 3),
        tier=rubric.tier(score),
        rationale=rationale,
        citations=tuple(citations),
        rules_fired=tuple(rule.id for rule in fired),
    )
    return guard(rubric, draft, issue.labels)


def guard(rubric: Rubric, draft: Draft, current_labels: tuple[str, ...] | list[str]) -> Draft:
    """The one policy every proposal passes, from any proposer. What it drops is kept and shown."""
    vocabulary = rubric.vocabulary
    present = set(current_labels)
    dropped: list[Dropped] = list(draft.dropped)
    add: list[str] = []
    for label in draft.add:
        if label == FORBIDDEN_ALWAYS or label in vocabulary.forbidden:
            reason = "forbidden: a human decides that; escalate with `triage review`"
        elif label not in vocabulary.allowed:
            reason = "not in the queue's vocabulary"
        elif label in present:
            reason = "already on the issue"
        elif label in add:
            continue
        else:
            group_taken = next(
                (
                    other
                    for group in vocabulary.exclusive
                    if label in group
                    for other in (*present, *add)
                    if other in group and other != label
                ),
                None,
            )
            if group_taken is None:
                add.append(label)
                continue
            reason = f"at most one of its group may be present, and {group_taken!r} is"
        dropped.append(Dropped(label, "add", reason))
    remove: list[str] = []
    for label in draft.remove:
        if label in vocabulary.protected:
            reason = "protected: never removed"
        elif label not in present:
            reason = "not on the issue"
        elif label in add:
            reason = "also proposed for adding"
        else:
            if label not in remove:
                remove.append(label)
            continue
        dropped.append(Dropped(label, "remove", reason))
    close = draft.close
    if close and not vocabulary.may_close:
        dropped.append(Dropped("close", "close", "this queue's rubric does not close issues"))
        close = False
    template, comment = draft.template, draft.comment
    if template and template not in rubric.templates:
        dropped.append(Dropped(template, "template", "not a template of this rubric"))
        template, comment = "", ""
    return replace(
        draft,
        add=tuple(add),
        remove=tuple(remove),
        template=template,
        comment=comment,
        close=close,
        dropped=tuple(dropped),
    )
