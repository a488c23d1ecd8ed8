"""The service asks for its weights in 2 MB pages where the kernel gives them on request."""

from pathlib import Path

import httpx2
import pytest

from harness import child_process, ports, waiting
from inference import huge_pages
from stack import commands

# The default model in fp32 holds 538 MB of weights; the rest of the heap is far smaller.
WEIGHTS_IN_HUGE_PAGES_BYTES = 256 * 2**20
# The rules below are glibc's: on another C library nothing is ever added.
on_glibc_with_the_tunable = pytest.mark.skipif(
    huge_pages._glibc_version() < huge_pages.GLIBC_MIN_VERSION, reason="not glibc 2.35 or newer")


def thp_mode(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "enabled"
    path.write_text(text)
    return path


@on_glibc_with_the_tunable
def test_the_tunable_is_added_to_glibc_tunables_already_set(tmp_path):
    mode = thp_mode(tmp_path, "always [madvise] never\n")

    environ = huge_pages.environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "HOME": "/x"}, mode)

    assert environ == {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1", "HOME": "/x"}


@pytest.mark.parametrize("mode_text", ["[always] madvise never\n", "always madvise [never]\n"])
def test_nothing_changes_where_the_kernel_does_not_wait_for_advice(tmp_path, mode_text):
    assert huge_pages.environment({}, thp_mode(tmp_path, mode_text)) is None


@on_glibc_with_the_tunable
def test_nothing_changes_where_hugetlb_is_set_already_or_the_kernel_has_no_huge_pages(tmp_path):
    mode = thp_mode(tmp_path, "always [madvise] never\n")

    assert huge_pages.environment({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, mode) is None
    assert huge_pages.environment({}, tmp_path / "missing") is None


def anon_huge_page_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.skipif(huge_pages.environment({}) is None,
                    reason="this kernel or C library gives no huge pages on request")
def test_the_served_default_model_has_its_weights_in_huge_pages():
    port = ports.free_port()
    url = f"http://127.0.0.1:{port}"
    # On the CPU where a GPU is present too: the weights in question are the host's.
    env = {"INFERENCE_HOST": "127.0.0.1", "INFERENCE_PORT": str(port), "INFERENCE_DEVICE": "cpu",
           "INFERENCE_DTYPE": "float32", "INFERENCE_THREADS": "1", "INFERENCE_COMPILE": "off", "INFERENCE_MAX_CACHED_TOKENS": "4096"}
    with child_process.running(commands.inference(), env=env, ready_url=f"{url}/health",
                               timeout_s=180) as server:
        waiting.wait_until(lambda: httpx2.get(f"{url}/health").status_code == 200, 180,
                           "the model to load")

        # The process started is the one serving: it started itself again, in place.
        assert huge_pages.TUNABLE in Path(f"/proc/{server.pid}/environ").read_text()
        assert anon_huge_page_bytes(server.pid) > WEIGHTS_IN_HUGE_PAGES_BYTES
