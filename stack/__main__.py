"""`make run`: prepares the database and starts every process of the local stack.

Starts what exists: the inference service (once `inference/` has one), CHATAPP_WEB_PROCESSES
daphne processes (stack/web.py: one without Redis, PostgreSQL or nginx), a Celery worker when REDIS_URL is
set (else the `reap_streams` command runs the periodic tasks in-process), and nginx in front of the daphne
processes when nginx is installed. One supervisor (stack/supervisor.py) owns them all: it starts a
crashed child again while the others keep serving; Ctrl-C, SIGTERM or closing the terminal stops
every child.
"""

import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from common import env, env_file, inference_address
from stack import commands, nginx, ports, web
from stack.readiness import Announcer, Check
from stack.files import REPO_DIR, StackFiles
from stack.supervisor import Prerequisite, Supervisor

def main() -> int:
    _load_local_environment()
    try:
        public_port, web_processes, nginx_binary = _plan()
    except (env.BadVariable, ImproperlyConfigured) as error:
        # The variable, the rule and a value that would do, in one line: a traceback says no more.
        print(f"chatapp: {error}", file=sys.stderr, flush=True)
        return 2
    if nginx_binary is None:
        print(f"chatapp: {nginx.MISSING.format(port=public_port)}", flush=True)
    if web_processes.why_one:
        print(f"chatapp: {web_processes.why_one}", flush=True)

    if _starts_inference() and subprocess.run(commands.inference_check(), cwd=REPO_DIR).returncode:
        return 2  # its one line is above
    for step in commands.preparation():
        finished = subprocess.run(step, cwd=REPO_DIR)
        if finished.returncode:
            print(f"chatapp: `manage.py {step[2]}` failed (exit {finished.returncode}); its output is above",
                  file=sys.stderr, flush=True)
            return finished.returncode

    files = StackFiles(public_port)
    supervisor = Supervisor(cwd=REPO_DIR, pid_dir=files.pids)
    for name, command, after in _processes(files, web_processes, nginx_binary is not None):
        supervisor.add(name, command, after)
    address = f"http://127.0.0.1:{public_port}/"
    announcer = Announcer(_readiness(public_port), say=supervisor.announce,
                          ready=f"\nchatapp: ready at {address}  (admin: /admin/; Ctrl-C stops)\n")
    # SIGHUP: the terminal was closed. Its default ends the supervisor alone, leaving the children.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: (announcer.stop(), supervisor.stop()))
    print(f"chatapp: starting; {address} once it answers and the model has loaded", flush=True)
    announcer.start()
    try:
        return supervisor.run()
    finally:
        announcer.stop()


def _readiness(public_port: int) -> tuple[Check, ...]:
    """What answers once the stack is ready: the app through its public port (nginx, a web
    process, the database), and the inference service this stack starts, its model loaded."""
    app = Check("the app", f"http://127.0.0.1:{public_port}/healthz")
    if not _starts_inference():
        return (app,)
    return app, Check("the inference service", f"{inference_address.local_url()}/health")


def _plan() -> tuple[int, web.WebProcesses, str | None]:
    """The public port, the web processes and the nginx binary (None without one), once the
    settings every process will read have been read here first: a bad one stops the start
    before any child repeats its traceback."""
    settings.DEBUG  # noqa: B018  (reading one setting imports the settings module, as every child will)
    public_port = env.port("CHATAPP_PORT", 8000)
    daphne_port = env.port("CHATAPP_DAPHNE_PORT", 8002)
    nginx_binary = nginx.installed()
    if nginx_binary is None:
        daphne_port = public_port
    asked = env.integer("CHATAPP_WEB_PROCESSES", web.default_count(), minimum=1)
    web_processes = web.plan(asked, first_port=daphne_port, with_redis=bool(env.string("REDIS_URL")),
                             on_sqlite=(env.string("DATABASE_URL") or "sqlite:").startswith("sqlite:"),
                             with_nginx=nginx_binary is not None)
    claims = _port_claims(public_port, web_processes, with_nginx=nginx_binary is not None)
    _refuse_overlapping_ports(claims)
    _refuse_ports_in_use(claims)
    return public_port, web_processes, nginx_binary


@dataclass(frozen=True)
class PortClaim:
    """The ports one variable gives servers of the stack."""
    variable: str
    value: int
    ports: tuple[int, ...]


def _port_claims(public_port: int, web_processes: web.WebProcesses, with_nginx: bool) -> list[PortClaim]:
    claims = [PortClaim("CHATAPP_PORT", public_port, (public_port,))]
    if with_nginx:  # without, the one web process serves the public port itself
        claims.append(PortClaim("CHATAPP_DAPHNE_PORT", web_processes.ports[0], web_processes.ports))
    if _starts_inference():
        claims.append(PortClaim("INFERENCE_PORT", inference_address.port(), (inference_address.port(),)))
    return claims


def _refuse_overlapping_ports(claims: list[PortClaim]) -> None:
    """Raises when two of the stack's own servers would listen on one port: both were started,
    one failing to bind it at every restart (nginx looping on "Address already in use"), and
    the stack said it was ready all the same."""
    for index, claim in enumerate(claims):
        for earlier in claims[:index]:
            shared = sorted(set(claim.ports) & set(earlier.ports))
            if shared:
                raise env.BadVariable(
                    f"{claim.variable}={claim.value} and {earlier.variable}={earlier.value} both give "
                    f"port {shared[0]} to a server of the stack; each needs its own: "
                    f"{_would_do(claim, claims)}")


def _refuse_ports_in_use(claims: list[PortClaim]) -> None:
    """Raises when another program listens on a port the stack's servers need: else nginx,
    daphne or the inference service would fail to bind it at every restart, for as long as the
    stack ran, under an address that answers with that other program (the inference service's
    port was once left alone; the web processes then spoke to whatever served there). A server
    of the user's own goes into INFERENCE_URL on a port of its own."""
    for claim in claims:
        taken = [port for port in claim.ports if not ports.free(port)]
        if taken:
            raise env.BadVariable(
                f"{claim.variable}={claim.value}: {ports.HOST}:{taken[0]} is in use by another program "
                f"(a chatapp already running?); stop it, or choose another port: {_would_do(claim, claims)}")


def _would_do(claim: PortClaim, claims: list[PortClaim]) -> str:
    """A value of the claim's variable whose ports are free and none of the stack's others."""
    others = {port for other in claims if other is not claim for port in other.ports}
    instead = ports.free_run_after(claim.value, len(claim.ports), others | set(claim.ports))
    return f"{claim.variable}={instead} would do" if instead else "no free port above it"


def _processes(files: StackFiles, web_processes: web.WebProcesses, with_nginx: bool):
    if _starts_inference():
        yield "inference", commands.inference(), None
    # Each its own child of the supervisor: one that crashes restarts while the others serve.
    for name, port in zip(web_processes.names(), web_processes.ports):
        yield name, commands.daphne(port), None
    if env.string("REDIS_URL"):
        # One local worker also runs the periodic schedule (beat), e.g. ending interrupted streams.
        yield "worker", commands.celery_worker(files.beat_schedule), None
    else:
        # Without a broker nothing runs the schedule: this runs it (ends the streams a dead daphne
        # left open, purges what CHAT_RETENTION_DAYS let expire).
        yield "reaper", commands.reaper(), None
    if with_nginx:
        site = nginx.NginxSite(listen=f"127.0.0.1:{files.public_port}",
                               upstreams=tuple(f"127.0.0.1:{port}" for port in web_processes.ports))
        # Not before the web processes listen (stack/supervisor.py, Prerequisite, says why).
        names = web_processes.names()
        after = Prerequisite(web_processes.all_listening,
                             f"{', '.join(names)} {'listens' if len(names) == 1 else 'listen'}")
        yield "nginx", nginx.command(nginx.render(site, files.nginx)), after


def _starts_inference() -> bool:
    return (REPO_DIR / "inference" / "__main__.py").exists()


def _load_local_environment() -> None:
    """Reads `.env` (untracked), first writing a fresh secret key into it if it has none."""
    if env_file.load_local(with_secret_key=True):
        print("Wrote a new secret key to .env (untracked).")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", env_file.PROJECT_SETTINGS)


if __name__ == "__main__":
    sys.exit(main())
