"""How many web processes `make run` starts: as asked behind nginx on Redis and PostgreSQL, else
one, saying why."""

from stack import web


def test_several_processes_take_consecutive_ports_from_the_first():
    planned = web.plan(3, first_port=8002, with_redis=True, on_sqlite=False, with_nginx=True)

    assert planned.ports == (8002, 8003, 8004)
    assert planned.names() == ["web-1", "web-2", "web-3"]
    assert planned.why_one == ""


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
