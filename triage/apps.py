from __future__ import annotations

from django.apps import AppConfig


class TriageConfig(AppConfig):
    name = "triage"
    default_auto_field = "django.db.models.BigAutoField"
