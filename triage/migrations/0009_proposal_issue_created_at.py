from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.db.models import OuterRef, Q, Subquery


def copy_issue_created_at(apps: Any, schema_editor: Any) -> None:
    Issue = apps.get_model("triage", "Issue")
    Proposal = apps.get_model("triage", "Proposal")
    Proposal.objects.update(
        issue_created_at=Subquery(
            Issue.objects.filter(pk=OuterRef("issue_id")).values("created_at")[:1]
        )
    )


class Migration(migrations.Migration):
    dependencies = [("triage", "0008_queue_etag_rate_budget")]

    operations = [
        migrations.AddField(
            model_name="proposal",
            name="issue_created_at",
            field=models.DateTimeField(null=True),
        ),
        migrations.RunPython(copy_issue_created_at, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="proposal",
            name="issue_created_at",
            field=models.DateTimeField(),
        ),
        migrations.RemoveIndex(model_name="proposal", name="triage_prop_queue_i_97c6b6_idx"),
        migrations.AddIndex(
            model_name="proposal",
            index=models.Index(
                condition=Q(status="pending"),
                fields=["queue", "-issue_created_at", "-id"],
                name="proposal_pending_newest",
            ),
        ),
        migrations.AddIndex(
            model_name="proposal",
            index=models.Index(
                condition=Q(status="pending"),
                fields=["queue", "score", "-issue_created_at", "-id"],
                name="proposal_pending_confidence",
            ),
        ),
    ]
