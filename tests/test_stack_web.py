"""How many web processes `make run` starts: as asked behind nginx on Redis and PostgreSQL, else
one, saying why; and which of their ports are free before it starts them."""

import socket

import pytest

from common import env
from stack import ports as stack_ports
from stack import web
from stack.files import StackFiles


def test_several_processes_take_consecutive_ports_from_the_first():
    planned = web.plan(3, first_port=8002, with_redis=True, on_sqlite=False, with_nginx=True)

    assert planned.ports == (8002, 8003, 8004)
    assert planned.names() == ["web-1", "web-2", "web-3"]
    assert planned.why_one == ""


def test_web_processes_whose_ports_would_run_past_the_last_are_refused_naming_a_first_port_that_fits():
    with pytest.raises(env.BadVariable) as refused:
        web.plan(3, first_port=65534, with_redis=True, on_sqlite=False, with_nginx=True)

    assert "CHATAPP_DAPHNE_PORT=65534" in str(refused.value) and "CHATAPP_DAPHNE_PORT=65533 would do" in str(refused.value)


def test_without_redis_one_process_serves_and_the_reason_names_the_channel_layer():
    planned = web.plan(4, first_port=8002, with_redis=False, on_sqlite=False, with_nginx=True)

    assert planned.ports == (8002,)
    assert planned.names() == ["web"]
    assert "REDIS_URL" in planned.why_one and "channel layer" in planned.why_one


def test_on_sqlite_one_process_serves_and_the_reason_names_sqlite():
    planned = web.plan(2, first_port=8002, with_redis=True, on_sqlite=True, with_nginx=True)

    assert planned.ports == (8002,)
    assert "SQLite" in planned.why_one and "PostgreSQL" in planned.why_one


def test_without_nginx_one_process_serves_and_the_reason_names_nginx():
    planned = web.plan(2, first_port=8000, with_redis=True, on_sqlite=False, with_nginx=False)

    assert planned.ports == (8000,)
    assert "nginx" in planned.why_one


def test_one_process_asked_is_one_process_with_nothing_to_explain():
    planned = web.plan(1, first_port=8002, with_redis=False, on_sqlite=True, with_nginx=False)

    assert planned.ports == (8002,) and planned.names() == ["web"] and planned.why_one == ""


def test_the_default_is_one_process_per_core_this_process_may_use():
    assert web.default_count() >= 1


def test_a_port_something_listens_on_is_not_free():
    with socket.create_server((stack_ports.HOST, 0)) as server:
        assert not stack_ports.free(server.getsockname()[1])


def test_a_port_whose_last_connection_is_still_closing_is_free_as_nginx_and_daphne_bind():
    with socket.create_server((stack_ports.HOST, 0)) as server:
        port = server.getsockname()[1]
        client = socket.create_connection((stack_ports.HOST, port))
        accepted, _ = server.accept()
        accepted.close()  # the side that closes first keeps the port in TIME_WAIT
    client.close()

    assert stack_ports.free(port)


def test_a_run_of_free_ports_suggested_instead_skips_the_stacks_other_ports_and_taken_ones():
    with socket.create_server((stack_ports.HOST, 0)) as server:
        taken = server.getsockname()[1]
        first = stack_ports.free_run_after(taken - 3, 2, avoiding={taken - 2})

    assert first is not None and first > taken


def test_stacks_on_two_public_ports_keep_each_its_own_files():
    # CI's two workers ran two stacks at once: one's nginx, started once its web processes
    # listened, read the other's configuration, written meanwhile to the same file; their
    # supervisors wrote the same pid files and their Celery beats one schedule.
    first, second = StackFiles(8000), StackFiles(8100)
    places = ("nginx", "pids", "beat_schedule")

    for one in (first, second):
        assert all(getattr(one, place).parent == one.root for place in places)
    assert not first.root.is_relative_to(second.root) and not second.root.is_relative_to(first.root)
