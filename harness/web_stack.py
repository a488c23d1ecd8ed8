"""The app as users reach it: daphne on a database of the caller's, nginx in front serving frontend/."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.child_process import running
from harness.ports import free_port
from stack import commands, nginx


@contextmanager
def nginx_and_daphne(env: dict[str, str], tmp_dir: Path) -> Iterator[str]:
    """The app as users reach it: daphne with `env`, nginx in front serving frontend/."""
    daphne_port, public_port = free_port(), free_port()
    site = nginx.NginxSite(listen=f"127.0.0.1:{public_port}", upstreams=(f"127.0.0.1:{daphne_port}",))
    config = nginx.render(site, tmp_dir / "nginx")
    with running(commands.daphne(daphne_port), env=env, ready_url=f"http://127.0.0.1:{daphne_port}/healthz"), \
            running(nginx.command(config), ready_url=f"http://127.0.0.1:{public_port}/healthz"):
        yield f"http://127.0.0.1:{public_port}"
