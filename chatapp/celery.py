"""The Celery application; broker and eagerness come from Django settings (REDIS_URL)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatapp.settings")

# chatapp/tasks.py is found by autodiscovery; the titles' task lives beside its request.
app = Celery("chatapp", include=["chatapp.upstream.titles"])
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
