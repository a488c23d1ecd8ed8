#!/usr/bin/env python
import os
import sys

from common import env_file


def main() -> None:
    # `make run`'s .env, its secret key and DATABASE_URL included, as the stack reads it.
    env_file.load_local()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", env_file.PROJECT_SETTINGS)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
