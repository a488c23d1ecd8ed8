"""Memory a process freed goes back to the system when the heap is trimmed."""

import ctypes

import pytest

from inference.engine import heap


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.skipif(heap._LIBC is None or not hasattr(heap._LIBC, "malloc_trim"),
                    reason="no glibc malloc_trim here")
def test_small_blocks_freed_by_the_process_are_returned_by_a_trim():
    # Many blocks below glibc's mmap threshold: freed, they stay in the heap until trimmed.
    blocks = [ctypes.create_string_buffer(b"x" * 4000, 4096) for _ in range(50_000)]
    # Still in use above them, as a loaded model's tensors are: the heap's top cannot shrink.
    kept = [ctypes.create_string_buffer(4096) for _ in range(10)]
    holding = resident_bytes()
    del blocks

    assert heap.trim() is True
    assert resident_bytes() < holding - 100 * 2**20  # most of the ~200 MB went back
    assert kept[0].raw == bytes(4096)
