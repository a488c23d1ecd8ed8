"""Offline checks of the Docker deployment: no Docker engine, no network, no database.

The compose-spec JSON schema (shipped inside check-jsonschema) catches misspelt keys and wrong
types; the reference checks below catch what a schema cannot see: names that point at nothing
and paths missing from the repository.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chatapp.management.commands import prepare
from stack import commands

ROOT = Path(__file__).resolve().parent.parent
BASE_FILE = ROOT / "docker-compose.yml"
GPU_FILE = ROOT / "docker-compose.gpu.yml"
ENV_DIR = ROOT / "docker" / "env"
PUBLIC_SERVICE = "nginx"
NGINX_TEMPLATE_TARGET = "/etc/nginx/templates/chatapp.conf.template"
DJANGO_SERVICES = ("migrate", "web", "worker", "beat")
# Jobs that run once and end (migrations): no restart, no health; what needs them waits for
# them to complete.
ONE_SHOT_JOBS = {"migrate"}


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def merge(base: dict, override: dict) -> dict:
    """Mappings merge key by key, anything else is replaced. Compose appends some lists
    (ports, volumes) instead; the GPU override sets none, so the result is the same."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


@pytest.fixture(params=["base", "with gpu override"])
def compose(request) -> dict:
    base = load(BASE_FILE)
    return base if request.param == "base" else merge(base, load(GPU_FILE))


def services(compose: dict) -> dict:
    return compose.get("services") or {}


def dependencies(service: dict) -> dict:
    """depends_on in either syntax, as {name: options}; the list form has no condition."""
    depends_on = service.get("depends_on") or {}
    return {name: {} for name in depends_on} if isinstance(depends_on, list) else depends_on


def volume_mounts(service: dict) -> list[tuple[str, str, str]]:
    """(type, source, target) per mount; short syntax: a source path means a bind mount."""
    mounts = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            mounts.append((entry.get("type", "volume"), entry.get("source", ""), entry["target"]))
            continue
        parts = entry.split(":")
        if len(parts) == 1:  # anonymous volume: nothing to declare
            mounts.append(("volume", "", parts[0]))
        else:
            kind = "bind" if parts[0].startswith((".", "/", "~")) else "volume"
            mounts.append((kind, parts[0], parts[1]))
    return mounts


def env_files(service: dict) -> list[str]:
    entries = service.get("env_file") or []
    entries = [entries] if isinstance(entries, str) else entries
    return [entry["path"] if isinstance(entry, dict) else entry for entry in entries]


def read_env_file(path: Path) -> dict[str, str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    pairs = (line.split("=", 1) for line in lines if line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def missing_dependencies(compose: dict) -> list[str]:
    names = set(services(compose))
    return [
        f"{name} depends on {dependency}, which is not a service"
        for name, service in services(compose).items()
        for dependency in dependencies(service)
        if dependency not in names
    ]


# A server that ends for any reason, a crash or a clean exit, is started again; `docker compose
# stop` still stops it for good.
RESTARTING_POLICIES = {"unless-stopped", "always"}


def services_that_stay_down(compose: dict) -> list[str]:
    return [name for name, service in services(compose).items()
            if name not in ONE_SHOT_JOBS and service.get("restart") not in RESTARTING_POLICIES]


def check_schema(*paths: Path) -> subprocess.CompletedProcess:
    # The schema is bundled with check-jsonschema, so this needs no network.
    command = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
    return subprocess.run([*command, *map(str, paths)], capture_output=True, text=True)


@pytest.mark.process
def test_both_compose_files_match_the_compose_spec_schema():
    # The schema requires no key of a service, so the partial GPU override validates alone.
    result = check_schema(BASE_FILE, GPU_FILE)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.process
def test_the_base_file_with_the_gpu_override_merged_matches_the_compose_spec_schema(tmp_path):
    merged = tmp_path / "merged.yml"
    merged.write_text(yaml.safe_dump(merge(load(BASE_FILE), load(GPU_FILE))))
    result = check_schema(merged)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_service_named_in_depends_on_exists(compose):
    assert missing_dependencies(compose) == []


def test_the_dependency_check_reports_a_service_that_does_not_exist():
    broken = {"services": {"web": {"depends_on": {"db": {"condition": "service_healthy"}}}}}
    assert missing_dependencies(broken) == ["web depends on db, which is not a service"]


def test_every_service_comes_back_after_its_container_crashes(compose):
    assert services_that_stay_down(compose) == []


def test_the_restart_check_reports_a_service_without_a_restart_policy():
    compose = {"services": {"web": {"restart": "unless-stopped"}, "worker": {}, "beat": {"restart": "no"}}}
    assert services_that_stay_down(compose) == ["worker", "beat"]


def test_every_depends_on_waits_for_a_healthy_service_or_a_completed_job(compose):
    loose = [
        f"{name} -> {dependency}"
        for name, service in services(compose).items()
        for dependency, options in dependencies(service).items()
        if options.get("condition") != ("service_completed_successfully" if dependency in ONE_SHOT_JOBS
                                         else "service_healthy")
    ]
    assert loose == []


def test_every_service_but_a_one_shot_job_has_a_healthcheck(compose):
    unchecked = [
        name
        for name, service in services(compose).items()
        if name not in ONE_SHOT_JOBS and (not service.get("healthcheck", {}).get("test")
                                          or service["healthcheck"].get("disable"))
    ]
    assert unchecked == []


def test_every_named_volume_used_by_a_service_is_declared_at_top_level(compose):
    declared = set(compose.get("volumes") or {})
    undeclared = [
        f"{name}: {source}"
        for name, service in services(compose).items()
        for kind, source, _ in volume_mounts(service)
        if kind == "volume" and source and source not in declared
    ]
    assert undeclared == []


def test_every_bind_mounted_repository_path_exists(compose):
    missing = [
        f"{name}: {source}"
        for name, service in services(compose).items()
        for kind, source, _ in volume_mounts(service)
        if kind == "bind" and source.startswith(".") and not (ROOT / source).exists()
    ]
    assert missing == []


def test_the_nginx_template_is_mounted_where_the_nginx_image_renders_templates(compose):
    sources = [
        source
        for kind, source, target in volume_mounts(services(compose)[PUBLIC_SERVICE])
        if kind == "bind" and target == NGINX_TEMPLATE_TARGET
    ]
    assert len(sources) == 1
    assert (ROOT / sources[0]).is_file()


def test_every_env_file_named_by_a_service_exists(compose):
    missing = [
        f"{name}: {path}"
        for name, service in services(compose).items()
        for path in env_files(service)
        if not (ROOT / path).is_file()
    ]
    assert missing == []


def test_every_build_context_dockerfile_target_and_build_arg_exist(compose):
    for name, service in services(compose).items():
        build = service.get("build")
        if build is None:
            continue
        build = {"context": build} if isinstance(build, str) else build
        context = ROOT / build.get("context", ".")
        assert context.is_dir(), f"{name}: no build context {context}"
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), f"{name}: no Dockerfile {dockerfile}"
        text = dockerfile.read_text()
        stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", text, re.MULTILINE | re.IGNORECASE)
        if "target" in build:
            assert build["target"] in stages, f"{name}: no stage {build['target']}"
        for arg in build.get("args") or {}:
            assert re.search(rf"^ARG\s+{arg}\b", text, re.MULTILINE), f"{name}: no ARG {arg}"


def test_only_nginx_publishes_ports(compose):
    publishing = [name for name, service in services(compose).items() if service.get("ports")]
    assert publishing == [PUBLIC_SERVICE]


def test_nginx_listens_on_the_container_port_it_publishes(compose):
    nginx = services(compose)[PUBLIC_SERVICE]
    listen = {}
    for path in env_files(nginx):
        listen.update(read_env_file(ROOT / path))
    container_ports = {str(port).rsplit(":", 1)[-1].split("/")[0] for port in nginx["ports"]}
    assert container_ports == {listen["CHATAPP_LISTEN"]}


def test_the_django_secret_key_comes_from_the_shell_and_debug_stays_off(compose):
    for name in DJANGO_SERVICES:
        secret = services(compose)[name]["environment"]["DJANGO_SECRET_KEY"]
        assert secret.startswith("${DJANGO_SECRET_KEY:?"), name
    for path in ENV_DIR.glob("*.env"):
        variables = read_env_file(path)
        assert "DJANGO_SECRET_KEY" not in variables, f"{path.name} holds the secret key"
        assert variables.get("DJANGO_DEBUG", "0") in {"0", "false", "no", "off", ""}, path.name


def nginx_variables(compose: dict) -> dict[str, str]:
    variables = {}
    for path in env_files(services(compose)[PUBLIC_SERVICE]):
        variables.update(read_env_file(ROOT / path))
    return variables


def test_every_placeholder_of_the_nginx_template_is_set_for_the_nginx_image(compose):
    # The image's envsubst leaves an unset ${NAME} in place, and nginx then refuses the file.
    placeholders = set(re.findall(r"\$\{(CHATAPP_\w+)\}", (ROOT / "nginx" / "chatapp.conf.template").read_text()))
    assert placeholders - set(nginx_variables(compose)) == set()


def test_nginx_reaches_every_replica_of_web_and_follows_scaling(compose):
    variables = nginx_variables(compose)
    exposed = {str(port) for port in services(compose)["web"]["expose"]}
    upstream = re.findall(r"server\s+([\w.-]+):(\d+)([^;]*);", variables["CHATAPP_UPSTREAM_SERVERS"])
    image_version = services(compose)[PUBLIC_SERVICE]["image"].split(":")[1]
    assert [(host, port) for host, port, _ in upstream] == [("web", port) for port in exposed]
    assert all("resolve" in options.split() for _, _, options in upstream)
    assert variables["CHATAPP_RESOLVER"].startswith("resolver 127.0.0.11 ")  # Docker's DNS
    # `resolve` in an upstream came to open-source nginx in 1.27.3.
    assert tuple(map(int, image_version.split("."))) >= (1, 27, 3)


def test_web_can_be_scaled_no_fixed_name_and_no_published_port(compose):
    web = services(compose)["web"]
    assert "container_name" not in web and not web.get("ports")


def test_the_migrations_run_once_before_any_web_replica_starts(compose):
    migrate = services(compose)["migrate"]
    assert migrate["command"][-2:] == ["manage.py", "prepare"] and migrate["restart"] == "no"
    assert not {"migrate", "prepare"} & set(" ".join(services(compose)["web"]["command"]).split())
    assert dependencies(services(compose)["web"])["migrate"] == {"condition": "service_completed_successfully"}


def test_the_migrate_job_prepares_what_make_run_does_and_creates_the_first_admin_account(compose):
    """Before, it migrated and collected the static files only: in Docker nobody could sign in."""
    migrate = services(compose)["migrate"]

    steps = re.findall(r"manage\.py (\w+)", " ".join(migrate["command"]))

    assert steps == [command[2] for command in commands.preparation()] == ["prepare"]
    assert [name for name, _ in prepare.STEPS] == ["migrate", "collectstatic", "ensure_admin"]
    for name in ("DJANGO_ADMIN_USERNAME", "DJANGO_ADMIN_EMAIL", "DJANGO_ADMIN_PASSWORD"):
        assert migrate["environment"][name].startswith(f"${{{name}:-"), name  # from the shell or .env


def test_inference_can_be_scaled_and_web_spreads_answers_over_every_replica(compose):
    # `--scale inference=N`: Docker's DNS answers the name `inference` with every container, and
    # the web process, resolving it (INFERENCE_RESOLVE_REPLICAS), treats each address as a replica.
    inference = services(compose)["inference"]
    assert "container_name" not in inference and not inference.get("ports")
    web = {}
    for path in env_files(services(compose)["web"]):
        web.update(read_env_file(ROOT / path))
    exposed = {str(port) for port in inference["expose"]}
    assert [url.strip() for url in web["INFERENCE_URL"].split(",")] == [f"http://inference:{port}" for port in exposed]
    assert web["INFERENCE_RESOLVE_REPLICAS"] == "1"
