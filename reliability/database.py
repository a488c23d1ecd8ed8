"""The suite's own view of the stack's database, through the app's models (Django ORM in the
suite's process, on the same DATABASE_URL as the stack).

Call `use_database` once, before anything imports the models, and only outside a running
event loop: the ORM is synchronous.
"""

import os

import django


def use_database(database_url: str, redis_url: str) -> None:
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "chatapp.settings",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
    })
    os.environ.setdefault("DJANGO_SECRET_KEY", "reliability-suite-only-not-a-secret-" + "x" * 20)
    django.setup()


def create_users(count: int, password: str, prefix: str = "user") -> list[str]:
    """`count` users sharing one password, hashed once (hashing is slow by design)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.db import connection

    user_model = get_user_model()
    hashed = make_password(password)
    names = [f"{prefix}{i:03d}" for i in range(count)]
    user_model.objects.bulk_create([user_model(username=name, password=hashed) for name in names])
    connection.close()  # the suite holds no connection while it measures the stack's
    return names
