"""What several processes need built (our kernels, the converted model, llama.cpp's server) is
built by one of them; the others wait for it and build nothing (common/build_lock.py)."""

import threading

from common import build_lock


def test_a_caller_that_finds_another_building_waits_and_then_builds_nothing(tmp_path):
    lock = tmp_path / "thing.lock"
    built, builds, first_look = [], [], threading.Event()

    def is_built() -> bool:
        first_look.set()
        return bool(built)

    # Another process's build under way: this test holds the lock (a lock file is held per open
    # file, so a thread of this process waits on it as another process would).
    with build_lock.held(lock):
        second = threading.Thread(target=build_lock.build_once,
                                  args=(lock, is_built, lambda: builds.append("again")))
        second.start()
        assert first_look.wait(30)  # it has looked, found nothing built yet, and goes for the lock
        built.append("by the first")
    second.join(30)

    assert not second.is_alive()
    assert builds == []  # before: it built it again, beside the first


def test_what_is_built_already_is_not_built_again_and_takes_no_lock(tmp_path):
    builds = []

    build_lock.build_once(tmp_path / "folder" / "thing.lock", lambda: True, lambda: builds.append(1))

    assert builds == [] and not (tmp_path / "folder").exists()


def test_what_nobody_built_is_built_once(tmp_path):
    built = []

    for _ in range(2):
        build_lock.build_once(tmp_path / "thing.lock", lambda: bool(built), lambda: built.append(1))

    assert built == [1]
