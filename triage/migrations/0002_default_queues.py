from __future__ import annotations

from django.conf import settings
from django.db import migrations

# The three queues the oncall rotation works. Editable afterwards in the admin: this only seeds.
DEFAULT_QUEUES = [
    {
        "slug": "pt2",
        "name": "PT2",
        "position": 1,
        "rubric": "pt2",
        "require_labels": ["oncall: pt2"],
        "exclude_labels": ["triaged"],
    },
    {
        "slug": "distributed",
        "name": "Distributed",
        "position": 2,
        "rubric": "distributed",
        "require_labels": ["oncall: distributed"],
        "exclude_labels": ["triaged"],
    },
    {
        "slug": "triage",
        "name": "Untriaged inflow",
        "position": 3,
        "rubric": "triage",
        "require_labels": [],
        "exclude_labels": ["oncall: *", "triaged"],
    },
]


def create_queues(apps, schema_editor):
    Queue = apps.get_model("triage", "Queue")
    for fields in DEFAULT_QUEUES:
        Queue.objects.get_or_create(
            slug=fields["slug"],
            defaults={**fields, "repository": settings.GITHUB_DEFAULT_REPOSITORY},
        )


class Migration(migrations.Migration):
    dependencies = [("triage", "0001_initial")]
    operations = [migrations.RunPython(create_queues, migrations.RunPython.noop)]
