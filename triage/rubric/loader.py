"""Loading a rubric from its files under triage/rubrics/<name>/, refusing any it cannot trust.

A rubric is four files: `rubric.md` (the prose, one stable id per section), `rules.toml`,
`vocabulary.toml` and `templates.toml`. Its version is a hash of the files, so a proposal
records exactly which text produced it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triage.rubric.signals import SIGNAL_NAMES

RUBRICS_DIR = Path(__file__).resolve().parent.parent / "rubrics"
LABEL_INVENTORY = RUBRICS_DIR / "pytorch-labels.json"
RUBRIC_FILES = ("rubric.md", "rules.toml", "vocabulary.toml", "templates.toml")
SECTION_HEADING = re.compile(r"^(#{2,3})\s+(.+?)\s*\{#([a-z0-9][a-z0-9-]*)\}\s*$")


class RubricError(Exception):
    def __init__(self, path: Path, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Template:
    name: str
    title: str
    body: str


@dataclass(frozen=True)
class Rule:
    id: str
    when: tuple[str, ...]
    any: tuple[str, ...]
    unless: tuple[str, ...]
    add: tuple[str, ...]
    remove: tuple[str, ...]
    template: str
    close: bool
    confidence: float
    sections: tuple[str, ...]
    rationale: str
    # Conditions on the labels the issue already carries.
    has_labels: tuple[str, ...] = ()
    # Each group: at least one of its labels is on the issue.
    has_one_of: tuple[tuple[str, ...], ...] = ()
    lacks_labels: tuple[str, ...] = ()
    # Labels no other rule may add when this one fires (the high-priority flow omits
    # ptd-bot-triaged so that a human picks the issue up), and whether later rules are skipped.
    suppress: tuple[str, ...] = ()
    stop: bool = False


@dataclass(frozen=True)
class Completion:
    """Labels added when a proposal finishes triage: it names one of `requires_any` and adds
    none of `blocked_by` (and the issue carries none of them)."""

    add: tuple[str, ...]
    requires_any: frozenset[str]
    blocked_by: frozenset[str]
    sections: tuple[str, ...]
    # How often humans left these labels where the rules say triage is done: a proposal that
    # adds them is no surer than that.
    confidence: float = 1.0


@dataclass(frozen=True)
class Vocabulary:
    allowed: frozenset[str]
    forbidden: frozenset[str]
    protected: frozenset[str]
    exclusive: tuple[tuple[str, ...], ...]
    # Whether a proposal or a decision in this queue may close the issue.
    may_close: bool = False


@dataclass(frozen=True)
class Rubric:
    name: str
    version: str
    sections: dict[str, Section]
    rules: tuple[Rule, ...]
    vocabulary: Vocabulary
    templates: dict[str, Template]
    high_tier: float
    medium_tier: float
    no_rule_score: float
    source_files: dict[str, str] = field(repr=False)
    completion: Completion | None = None

    def tier(self, score: float) -> str:
        if score >= self.high_tier:
            return "high"
        if score >= self.medium_tier:
            return "medium"
        return "low"


@functools.cache
def known_labels() -> frozenset[str]:
    return frozenset(entry["name"] for entry in json.loads(LABEL_INVENTORY.read_text()))


def available() -> list[str]:
    return sorted(p.name for p in RUBRICS_DIR.iterdir() if (p / "rules.toml").is_file())


@functools.cache
def load(name: str) -> Rubric:
    return load_from(RUBRICS_DIR / name)


def _line_of(text: str, needle: str) -> int:
    index = text.find(needle)
    return text.count("\n", 0, index) + 1 if index >= 0 else 1


TOML_ERROR_LINE = re.compile(r"\(at line (\d+), column \d+\)")


def _toml(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text()
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        # Python 3.14 gives exc.lineno; before that the line is only in the message.
        found = TOML_ERROR_LINE.search(str(exc))
        raise RubricError(path, int(found.group(1)) if found else 1, str(exc)) from None


def _parse_sections(path: Path) -> dict[str, Section]:
    sections: dict[str, Section] = {}
    current: tuple[str, str, list[str]] | None = None
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        heading = SECTION_HEADING.match(line)
        if heading:
            if current:
                sections[current[0]] = Section(
                    current[0], current[1], "\n".join(current[2]).strip()
                )
            section_id, title = heading.group(3), heading.group(2)
            if section_id in sections:
                raise RubricError(path, number, f"section id {section_id!r} is used twice")
            current = (section_id, title, [])
        elif line.startswith("## ") or line.startswith("### "):
            raise RubricError(path, number, "a section heading needs a stable id: '## Title {#id}'")
        elif current:
            current[2].append(line)
    if current:
        sections[current[0]] = Section(current[0], current[1], "\n".join(current[2]).strip())
    if not sections:
        raise RubricError(path, 1, "no sections")
    return sections


def _strings(value: Any, path: Path, text: str, where: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RubricError(path, _line_of(text, where), f"{key} must be a list of strings")
    return tuple(value)


def load_from(directory: Path) -> Rubric:
    missing = [name for name in RUBRIC_FILES if not (directory / name).is_file()]
    if missing:
        raise RubricError(directory / missing[0], 0, "file is missing")
    sources = {name: (directory / name).read_text() for name in RUBRIC_FILES}
    digest = hashlib.sha256()
    for name in RUBRIC_FILES:
        digest.update(name.encode() + b"\0" + sources[name].encode() + b"\0")
    labels = known_labels()

    sections = _parse_sections(directory / "rubric.md")

    vocab_path = directory / "vocabulary.toml"
    vocab_data, vocab_text = _toml(vocab_path)
    vocabulary = Vocabulary(
        allowed=frozenset(
            _strings(vocab_data.get("allowed", []), vocab_path, vocab_text, "allowed", "allowed")
        ),
        forbidden=frozenset(
            _strings(
                vocab_data.get("forbidden", []), vocab_path, vocab_text, "forbidden", "forbidden"
            )
        ),
        protected=frozenset(
            _strings(
                vocab_data.get("protected", []), vocab_path, vocab_text, "protected", "protected"
            )
        ),
        exclusive=tuple(
            _strings(group, vocab_path, vocab_text, "exclusive", "exclusive")
            for group in vocab_data.get("exclusive", [])
        ),
        may_close=vocab_data.get("may_close", False),
    )
    if not isinstance(vocabulary.may_close, bool):
        raise RubricError(
            vocab_path, _line_of(vocab_text, "may_close"), "may_close must be true or false"
        )
    for label in sorted(
        vocabulary.allowed
        | vocabulary.forbidden
        | vocabulary.protected
        | {label for group in vocabulary.exclusive for label in group}
    ):
        if label not in labels:
            raise RubricError(
                vocab_path, _line_of(vocab_text, f'"{label}"'), f"unknown label {label!r}"
            )

    templates_path = directory / "templates.toml"
    templates_data, templates_text = _toml(templates_path)
    templates: dict[str, Template] = {}
    for name, entry in templates_data.get("templates", {}).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("body"), str):
            raise RubricError(
                templates_path, _line_of(templates_text, name), f"template {name!r} needs a body"
            )
        templates[name] = Template(name, str(entry.get("title", name)), entry["body"])

    rules_path = directory / "rules.toml"
    rules_data, rules_text = _toml(rules_path)
    tiers = rules_data.get("tiers", {})
    rules: list[Rule] = []
    seen_ids: set[str] = set()
    # The n-th [[rule]] table is the n-th rule: that is where an error in it is reported.
    rule_lines = [
        number
        for number, text in enumerate(rules_text.splitlines(), start=1)
        if text.strip() == "[[rule]]"
    ]
    for index, entry in enumerate(rules_data.get("rule", [])):
        rule_id = entry.get("id")
        where = f'"{rule_id}"'
        line = rule_lines[index] if index < len(rule_lines) else _line_of(rules_text, where)
        if not isinstance(rule_id, str) or not rule_id:
            raise RubricError(rules_path, line, "a rule needs an id")
        if rule_id in seen_ids:
            raise RubricError(rules_path, line, f"rule id {rule_id!r} is used twice")
        seen_ids.add(rule_id)
        unknown_keys = set(entry) - {
            "id",
            "when",
            "any",
            "unless",
            "add",
            "remove",
            "template",
            "close",
            "confidence",
            "sections",
            "rationale",
            "has_labels",
            "has_one_of",
            "lacks_labels",
            "suppress",
            "stop",
        }
        if unknown_keys:
            raise RubricError(
                rules_path, line, f"rule {rule_id!r}: unknown key {sorted(unknown_keys)[0]!r}"
            )
        if not isinstance(entry.get("close", False), bool):
            raise RubricError(rules_path, line, f"rule {rule_id!r}: close must be true or false")
        if entry.get("close", False) and not vocabulary.may_close:
            raise RubricError(
                rules_path,
                line,
                f"rule {rule_id!r} closes the issue, but the vocabulary does not set may_close",
            )
        rule = Rule(
            id=rule_id,
            when=_strings(entry.get("when", []), rules_path, rules_text, where, "when"),
            any=_strings(entry.get("any", []), rules_path, rules_text, where, "any"),
            unless=_strings(entry.get("unless", []), rules_path, rules_text, where, "unless"),
            add=_strings(entry.get("add", []), rules_path, rules_text, where, "add"),
            remove=_strings(entry.get("remove", []), rules_path, rules_text, where, "remove"),
            template=str(entry.get("template", "")),
            close=entry.get("close", False),
            confidence=float(entry.get("confidence", 0.5)),
            sections=_strings(entry.get("sections", []), rules_path, rules_text, where, "sections"),
            rationale=str(entry.get("rationale", "")).strip(),
            has_labels=_strings(
                entry.get("has_labels", []), rules_path, rules_text, where, "has_labels"
            ),
            has_one_of=tuple(
                _strings(group, rules_path, rules_text, where, "has_one_of")
                for group in entry.get("has_one_of", [])
            ),
            lacks_labels=_strings(
                entry.get("lacks_labels", []), rules_path, rules_text, where, "lacks_labels"
            ),
            suppress=_strings(entry.get("suppress", []), rules_path, rules_text, where, "suppress"),
            stop=bool(entry.get("stop", False)),
        )
        if not (rule.when or rule.any or rule.has_labels or rule.has_one_of):
            raise RubricError(rules_path, line, f"rule {rule_id!r} has no condition")
        for signal in (*rule.when, *rule.any, *rule.unless):
            if signal not in SIGNAL_NAMES:
                raise RubricError(rules_path, line, f"rule {rule_id!r}: unknown signal {signal!r}")
        one_of = [label for group in rule.has_one_of for label in group]
        for label in (*rule.has_labels, *one_of, *rule.lacks_labels, *rule.suppress):
            if label not in labels:
                raise RubricError(rules_path, line, f"rule {rule_id!r}: unknown label {label!r}")
        for label in (*rule.add, *rule.remove):
            if label not in labels:
                raise RubricError(rules_path, line, f"rule {rule_id!r}: unknown label {label!r}")
            if label not in vocabulary.allowed:
                raise RubricError(
                    rules_path, line, f"rule {rule_id!r}: label {label!r} is not in the vocabulary"
                )
        for section in rule.sections:
            if section not in sections:
                raise RubricError(
                    rules_path, line, f"rule {rule_id!r}: unknown section {section!r}"
                )
        if not rule.sections:
            raise RubricError(rules_path, line, f"rule {rule_id!r} cites no section")
        if rule.template and rule.template not in templates:
            raise RubricError(
                rules_path, line, f"rule {rule_id!r}: unknown template {rule.template!r}"
            )
        if not 0.0 <= rule.confidence <= 1.0:
            raise RubricError(rules_path, line, f"rule {rule_id!r}: confidence must be in [0, 1]")
        rules.append(rule)

    completion = None
    if "completion" in rules_data:
        entry = rules_data["completion"]
        where = "[completion]"
        line = _line_of(rules_text, where)
        completion = Completion(
            add=_strings(entry.get("add", []), rules_path, rules_text, where, "add"),
            requires_any=frozenset(
                _strings(
                    entry.get("requires_any", []), rules_path, rules_text, where, "requires_any"
                )
            ),
            blocked_by=frozenset(
                _strings(entry.get("blocked_by", []), rules_path, rules_text, where, "blocked_by")
            ),
            sections=_strings(entry.get("sections", []), rules_path, rules_text, where, "sections"),
            confidence=float(entry.get("confidence", 1.0)),
        )
        if not 0.0 <= completion.confidence <= 1.0:
            raise RubricError(rules_path, line, "completion: confidence must be in [0, 1]")
        for label in (*completion.add, *completion.requires_any, *completion.blocked_by):
            if label not in labels:
                raise RubricError(rules_path, line, f"completion: unknown label {label!r}")
        # Conditions may name any label of the repository; what is added must be proposable.
        for label in (*completion.add, *completion.requires_any):
            if label not in vocabulary.allowed:
                raise RubricError(
                    rules_path, line, f"completion: label {label!r} is not in the vocabulary"
                )
        for section in completion.sections:
            if section not in sections:
                raise RubricError(rules_path, line, f"completion: unknown section {section!r}")

    return Rubric(
        name=directory.name,
        completion=completion,
        version=digest.hexdigest()[:16],
        sections=sections,
        rules=tuple(rules),
        vocabulary=vocabulary,
        templates=templates,
        high_tier=float(tiers.get("high", 0.8)),
        medium_tier=float(tiers.get("medium", 0.55)),
        no_rule_score=float(tiers.get("no_rule", 0.2)),
        source_files=sources,
    )
