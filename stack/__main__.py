"""`make run`: prepares the database and starts every process of the local stack.

Starts what exists: the inference service (once `inference/` has one), daphne, a Celery
worker when REDIS_URL is set, and nginx in front when nginx is installed. One supervisor
(honcho) owns them all; Ctrl-C or SIGTERM stops every child.
"""

import os
import secrets
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from dotenv import load_dotenv
from honcho.manager import Manager

from common import env
from stack import nginx

REPO_DIR = Path(__file__).resolve().parent.parent
LOCAL_ENV_FILE = REPO_DIR / ".env"
# honcho reports 130 or 143 when it stopped everything on SIGINT or SIGTERM; children that
# we stopped report -SIGTERM.
_STOPPED_BY_US = {0, 128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGTERM, -signal.SIGINT}


def main() -> int:
    _load_local_environment()
    public_port = env.integer("CHATAPP_PORT", 8000, minimum=1)
    daphne_port = env.integer("CHATAPP_DAPHNE_PORT", 8002, minimum=1)
    nginx_binary = nginx.installed()
    if nginx_binary is None:
        daphne_port = public_port

    for step in (["migrate", "--noinput"], ["collectstatic", "--noinput", "-v0"], ["ensure_admin"]):
        subprocess.run([sys.executable, "manage.py", *step], cwd=REPO_DIR, check=True)

    manager = Manager()
    for name, command in _processes(public_port, daphne_port, nginx_binary is not None):
        manager.add_process(name, shlex.join(command), cwd=str(REPO_DIR))
    print(f"\nchatapp: http://127.0.0.1:{public_port}/  (admin: /admin/; Ctrl-C stops)\n", flush=True)
    manager.loop()
    return _exit_status(manager.returncode)


def _processes(public_port: int, daphne_port: int, with_nginx: bool):
    python = sys.executable
    if (REPO_DIR / "inference" / "__main__.py").exists():
        yield "inference", [python, "-m", "inference"]
    yield "web", [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(daphne_port),
                  "chatapp.asgi:application"]
    if env.string("REDIS_URL"):
        # One local worker also runs the periodic schedule (beat), e.g. ending interrupted streams.
        yield "worker", [python, "-m", "celery", "-A", "chatapp", "worker", "--beat",
                         "--schedule", str(REPO_DIR / "var" / "celerybeat-schedule"),
                         "--loglevel", "INFO", "--concurrency", "1"]
    if with_nginx:
        site = nginx.NginxSite(listen=f"127.0.0.1:{public_port}", upstream=f"127.0.0.1:{daphne_port}")
        yield "nginx", nginx.command(nginx.render(site, REPO_DIR / "var" / "nginx"))


def _exit_status(first_child_status: int | None) -> int:
    """0 when the children ended because we stopped them; a crashed child's status otherwise."""
    if first_child_status is None or first_child_status in _STOPPED_BY_US:
        return 0
    return first_child_status


def _load_local_environment() -> None:
    """Reads `.env` (untracked), first writing a fresh secret key into it if it has none."""
    if not LOCAL_ENV_FILE.exists() and not env.string("DJANGO_SECRET_KEY"):
        LOCAL_ENV_FILE.write_text(f"DJANGO_SECRET_KEY={secrets.token_urlsafe(50)}\n")
        LOCAL_ENV_FILE.chmod(0o600)
        print(f"Wrote a new secret key to {LOCAL_ENV_FILE.name} (untracked).")
    # The shell's own environment wins over the file.
    load_dotenv(LOCAL_ENV_FILE, override=False)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatapp.settings")


if __name__ == "__main__":
    sys.exit(main())
