"""The untracked `.env` (common/env_file.py): `make run` writes a secret key into it when it has
none, keeping whatever else the file holds; it and manage.py read it under the project's own
settings, never under the tests'."""

import os
import shutil
import stat
import subprocess
import sys

import pytest
from dotenv import dotenv_values

from common import env_file
from harness.child_process import REPO_DIR


def test_an_env_file_that_does_not_exist_is_created_with_a_secret_key_only_its_owner_reads(tmp_path, monkeypatch):
    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    path = tmp_path / ".env"

    assert env_file.add_secret_key(path)

    assert len(dotenv_values(path)["DJANGO_SECRET_KEY"]) >= 50
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_existing_env_file_without_a_secret_key_gets_one_and_keeps_its_other_lines(tmp_path, monkeypatch):
    """Before, `make run` wrote a key only when there was no .env: `echo POSTGRES_PASSWORD=x >
    .env` left it refusing to start, blaming the key that `make run` writes."""
    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    path = tmp_path / ".env"
    path.write_text("# mine\nPOSTGRES_PASSWORD=x\n")

    assert env_file.add_secret_key(path)

    assert path.read_text().startswith("# mine\nPOSTGRES_PASSWORD=x\n")
    assert dotenv_values(path)["POSTGRES_PASSWORD"] == "x"
    assert len(dotenv_values(path)["DJANGO_SECRET_KEY"]) >= 50


def test_a_copy_of_env_example_gets_its_empty_secret_key_filled_in_place(tmp_path, monkeypatch):
    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    path = tmp_path / ".env"
    shutil.copy(REPO_DIR / ".env.example", path)

    assert env_file.add_secret_key(path)

    lines = path.read_text().splitlines()
    assert len([line for line in lines if line.startswith("DJANGO_SECRET_KEY=")]) == 1
    assert len(dotenv_values(path)["DJANGO_SECRET_KEY"]) >= 50
    example = (REPO_DIR / ".env.example").read_text().splitlines()
    assert [line for line in lines if not line.startswith("DJANGO_SECRET_KEY=")] == \
        [line for line in example if not line.startswith("DJANGO_SECRET_KEY=")]


def test_a_secret_key_in_the_file_or_in_the_environment_is_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    in_file = tmp_path / "in-file.env"
    in_file.write_text("DJANGO_SECRET_KEY=kept\n")
    assert not env_file.add_secret_key(in_file)

    monkeypatch.setenv("DJANGO_SECRET_KEY", "from-the-shell")
    in_shell = tmp_path / "in-shell.env"
    in_shell.write_text("POSTGRES_PASSWORD=x\n")
    assert not env_file.add_secret_key(in_shell)

    assert in_file.read_text() == "DJANGO_SECRET_KEY=kept\n"
    assert in_shell.read_text() == "POSTGRES_PASSWORD=x\n"


def manage_py(arguments: list[str], variables: dict[str, str]) -> subprocess.CompletedProcess:
    """manage.py with the shell's basics and these variables only (no secret key of the test run's)."""
    basics = {key: value for key, value in os.environ.items() if key.startswith(("PATH", "HOME", "LANG"))}
    return subprocess.run([sys.executable, "manage.py", *arguments], cwd=REPO_DIR, env={**basics, **variables},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.process
def test_manage_py_reads_the_env_file_as_make_run_does(tmp_path):
    """Before, `manage.py changepassword` or `check --deploy` after `make run` failed on the key
    that make run had written into .env, and a DATABASE_URL there went unread."""
    local = tmp_path / ".env"
    local.write_text(f"DJANGO_SECRET_KEY={'k' * 50}\nDATABASE_URL=sqlite:///{tmp_path / 'local.sqlite3'}\n")

    finished = manage_py(["diffsettings"], {"CHATAPP_ENV_FILE": str(local)})

    assert finished.returncode == 0, finished.stderr
    assert str(tmp_path / "local.sqlite3") in finished.stdout


@pytest.mark.process
def test_manage_py_under_the_tests_settings_leaves_the_env_file_unread(tmp_path):
    """The tests start manage.py children: a developer's .env must not reach them."""
    local = tmp_path / ".env"
    local.write_text("DATABASE_URL=bogus://\n")

    finished = manage_py(["diffsettings"], {"CHATAPP_ENV_FILE": str(local), "DJANGO_SETTINGS_MODULE": "tests.settings"})

    assert finished.returncode == 0, finished.stderr
    assert "bogus" not in finished.stdout
