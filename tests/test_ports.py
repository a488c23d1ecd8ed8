"""The loopback ports the tests and benchmarks give their servers."""

from harness import ports


def test_a_free_port_lies_below_the_range_outgoing_connections_take_their_ports_from():
    # CI saw nginx fail to bind a port handed out from the ephemeral range: an outgoing
    # connection had taken it as its local port in the meantime.
    assert all(ports.free_port() < ports._ephemeral_low() for _ in range(50))


def test_the_ports_handed_out_in_one_process_are_all_different():
    handed_out = [ports.free_port() for _ in range(200)]
    assert len(set(handed_out)) == len(handed_out)


def test_a_run_of_free_ports_is_consecutive_bindable_and_below_the_ephemeral_range():
    first = ports.free_port_run(3)
    assert first + 3 <= ports._ephemeral_low()
    assert all(ports._bindable(port) for port in range(first, first + 3))


def test_no_port_handed_out_is_one_browsers_refuse_to_connect_to(monkeypatch):
    # CI's browser tests failed with net::ERR_UNSAFE_PORT: their stack had been given 10080.
    # The free run is one found free now: a fixed one (10093) was once held by another test's
    # server, or handed out before in this process, and the test failed for that.
    monkeypatch.setattr(ports, "_handed_out", set())
    free = next(port for port in range(10100, 12000) if ports._bindable(port) and ports._bindable(port + 1))
    first_tried = [10079, 10080, free]  # a run of two over 10080, 10080 itself, then a free one
    monkeypatch.setattr(ports.random, "sample", lambda population, count: list(first_tried))

    assert ports.free_port_run(2) == free
