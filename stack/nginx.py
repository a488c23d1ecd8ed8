"""Renders nginx/*.conf.template for a local nginx run in the foreground."""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from string import Template

from stack.files import REPO_DIR

TEMPLATES_DIR = REPO_DIR / "nginx"
_TEMP_FOLDERS = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"]
# Where `manage.py collectstatic` puts Django's own files (settings.STATIC_ROOT) for nginx.
STATIC_ROOT = REPO_DIR / "var" / "static"


@dataclass(frozen=True)
class NginxSite:
    listen: str  # what follows `listen`: "8000" or "127.0.0.1:8000"
    upstreams: tuple[str, ...]  # each daphne process's "host:port"
    frontend_root: Path = REPO_DIR / "frontend"
    static_root: Path = STATIC_ROOT


def installed() -> str | None:
    """The nginx binary on PATH, when there is one. PATH alone, so that what the shell would run
    is what runs (and a PATH without it means none: the stack then says so)."""
    return shutil.which("nginx")


# What `make run` says once when there is none: what changes, and how to add it.
MISSING = ("nginx not found on PATH: daphne serves port {port} itself, so Django also serves the "
           "front end's files, one web process serves, and nothing in front absorbs slow clients; "
           "install nginx (apt-get install nginx) or put its directory on PATH, then `make run` again")


def render(site: NginxSite, directory: Path, site_template: str | None = None) -> Path:
    """Writes nginx.conf and the site into `directory`; returns the main config's path.

    `site_template` replaces nginx/chatapp.conf.template (tests use it for a default config).
    """
    for name in _TEMP_FOLDERS:
        (directory / name).mkdir(parents=True, exist_ok=True)
    values = {
        "CHATAPP_LISTEN": site.listen,
        "CHATAPP_UPSTREAM_SERVERS": "\n    ".join(f"server {address};" for address in site.upstreams),
        "CHATAPP_RESOLVER": "",  # Docker's: the replicas of `web` change while nginx runs
        "CHATAPP_FRONTEND_ROOT": str(site.frontend_root),
        "CHATAPP_STATIC_ROOT": str(site.static_root),
        "CHATAPP_NGINX_DIR": str(directory),
        "CHATAPP_NGINX_USER": "user root;" if os.geteuid() == 0 else "",
    }
    if site_template is None:
        site_template = (TEMPLATES_DIR / "chatapp.conf.template").read_text()
    (directory / "chatapp.conf").write_text(_fill(site_template, values))
    main = directory / "nginx.conf"
    main.write_text(_fill((TEMPLATES_DIR / "nginx.conf.template").read_text(), values))
    return main


def command(config: Path) -> list[str]:
    binary = installed()
    if binary is None:
        raise FileNotFoundError("nginx is not installed")
    return [binary, "-p", str(config.parent), "-c", str(config)]


def _fill(template: str, values: dict[str, str]) -> str:
    # safe_substitute leaves nginx's own $variables alone, as envsubst with a list does.
    return Template(template).safe_substitute(values)
