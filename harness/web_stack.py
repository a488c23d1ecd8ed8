"""The app as users reach it: daphne on a database of the caller's, nginx in front serving frontend/."""

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from common import build_lock
from harness.child_process import running
from harness.ports import free_port
from stack import commands, nginx
from stack.files import REPO_DIR

_collected = False


@contextmanager
def nginx_and_daphne(env: dict[str, str], tmp_dir: Path, access_logs: Sequence[Path] = ()) -> Iterator[str]:
    """The app as users reach it: daphne with `env`, nginx in front serving frontend/. With
    `access_logs`, one daphne process per log, each writing its own (nginx balances them by
    least connections, as `make run` does: they share a channel layer only on Redis)."""
    collect_static(env)
    logs = list(access_logs) or [None]
    daphne_ports, public_port = [free_port() for _ in logs], free_port()
    site = nginx.NginxSite(listen=f"127.0.0.1:{public_port}",
                           upstreams=tuple(f"127.0.0.1:{port}" for port in daphne_ports))
    config = nginx.render(site, tmp_dir / "nginx")
    with ExitStack() as started:
        for port, log in zip(daphne_ports, logs):
            started.enter_context(running(commands.daphne(port, access_log=log), env=env,
                                          ready_url=f"http://127.0.0.1:{port}/healthz"))
        started.enter_context(running(nginx.command(config), ready_url=f"http://127.0.0.1:{public_port}/healthz"))
        yield f"http://127.0.0.1:{public_port}"


def collect_static(env: dict[str, str]) -> None:
    """Django's own static files (the admin's) where nginx serves them, as `make run` collects
    them before it starts: a fresh checkout has none, and the admin's pages then load HTML 404s
    for their styles and scripts. Once a process; a lock keeps two test workers' copies apart."""
    global _collected
    if _collected:
        return
    with build_lock.held(nginx.STATIC_ROOT.parent / "static.lock"):
        subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
                       cwd=REPO_DIR, env=env, check=True)
    _collected = True
