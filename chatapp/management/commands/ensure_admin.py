"""Creates the first admin account when none exists; the password is printed once if generated."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from common import env


class Command(BaseCommand):
    help = "Create a superuser if there is none (DJANGO_ADMIN_* variables, else generated)."

    def handle(self, *args, **options):
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            self.stdout.write("An admin account exists already.")
            return
        username = env.string("DJANGO_ADMIN_USERNAME", "admin") or "admin"
        email = env.string("DJANGO_ADMIN_EMAIL")
        password = env.string("DJANGO_ADMIN_PASSWORD")
        generated = not password
        if generated:
            password = secrets.token_urlsafe(12)
        users.objects.create_superuser(username=username, email=email, password=password)
        if generated:
            self.stdout.write(
                self.style.WARNING(
                    f"Created admin account {username!r} with password {password!r}. "
                    "It is shown only this once."
                )
            )
        else:
            self.stdout.write(f"Created admin account {username!r} from DJANGO_ADMIN_PASSWORD.")
