"""What runs before the stack's processes start, in order, in one process: the migrations, the
static files (nginx serves them), and the first admin account (ensure_admin). `make run` runs it
(stack/commands.py), and docker-compose.yml's `migrate` job the same. Three `manage.py` runs
cost Django's start three times: 1.3-1.6 s each on a 2-core machine, at every `make run` and at
every stack the tests start."""

from django.core.management import call_command
from django.core.management.base import BaseCommand

# Each step, as `call_command` takes it.
STEPS = (("migrate", {"interactive": False}),
         ("collectstatic", {"interactive": False, "verbosity": 0}),
         ("ensure_admin", {}))


class Command(BaseCommand):
    help = "Migrate, collect the static files and create the first admin account when there is none."

    def handle(self, *args, **options):
        for name, step_options in STEPS:
            call_command(name, **step_options)
