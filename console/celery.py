from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console", task_cls="celery.contrib.django.task:DjangoTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
