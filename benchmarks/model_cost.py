"""The size of each queue's cached prompt and the expected model cost per issue, per mode.

Run: .venv/bin/python benchmarks/model_cost.py

Tokens are estimated at 4 characters each (no network here to count them exactly). The issue
part is measured on the labelled development set; the share of issues hybrid mode sends to the
model is the share the rules leave below the queue's threshold or unmatched on that set.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402

from triage import claude  # noqa: E402
from triage.rubric import engine, loader  # noqa: E402

DEVSET = Path(__file__).resolve().parent.parent / "triage" / "devset" / "issues.jsonl"
OUTPUT_TOKENS = 250  # a tool call with a few labels, citations and a short rationale
HYBRID_THRESHOLD = 0.7  # the Queue default


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def main() -> None:
    model = settings.ANTHROPIC_MODEL
    prices = settings.ANTHROPIC_PRICES[model]
    rows = [json.loads(line) for line in DEVSET.read_text().splitlines()]
    print(f"model {model}; $/MTok: {prices}")
    print(
        f"{'queue':12} {'cached prompt':>13} {'issue part':>10} {'llm $/issue':>11} {'hybrid share':>12} {'hybrid $/issue':>14} {'batch llm $/issue':>17}"
    )
    for name in ("pt2", "distributed", "triage"):
        rubric = loader.load(name)
        cached = tokens(claude.INSTRUCTIONS) + tokens(claude.rubric_prompt(rubric))
        cached += tokens(json.dumps(claude.tool_schema(rubric)))
        issues = [row for row in rows if row["queue"] == name]
        inputs = [
            engine.IssueInput(
                r["number"],
                r["title"],
                r["body"] or "",
                tuple(r.get("intake_labels") or ()),
                tuple((c["id"], c["body"]) for c in r["comments"]),
            )
            for r in issues
        ]
        issue_part = sum(tokens(claude.issue_prompt(i)) for i in inputs) / len(inputs)
        usage = {
            "input": issue_part,
            "output": OUTPUT_TOKENS,
            "cache_read": cached,
            "cache_write": 0,
        }
        per_issue = sum(prices[kind] * count for kind, count in usage.items()) / 1e6
        asked = 0
        for issue in inputs:
            draft = engine.propose(rubric, issue)
            asked += not draft.rules_fired or draft.score < HYBRID_THRESHOLD
        share = asked / len(inputs)
        batch = per_issue * settings.ANTHROPIC_BATCH_DISCOUNT
        print(
            f"{name:12} {cached:>13} {issue_part:>10.0f} {per_issue:>11.5f} {share:>12.2f} {per_issue * share:>14.5f} {batch:>17.5f}"
        )
    print("(the first issue of a queue in each 5-minute cache window also pays the cache write:")
    print(
        f" cached tokens x ${prices['cache_write']}/MTok instead of ${prices['cache_read']}/MTok)"
    )


if __name__ == "__main__":
    main()
