"""Our kernels built for AVX2 alone pass their tests. Most of this project's machines have
AVX-512, where the widest build serves and AVX2's code (its tiles, its sixteen-key sums, the
draw's exp) would run only on the occasional machine without it."""

import subprocess
import sys

import pytest

from inference.engine.loader import cpu_flags

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.mark.skipif(not {"avx2", "fma", "avx512f"} <= cpu_flags(),
                    reason="only a CPU with AVX-512 too: elsewhere the suite's own build is AVX2's or none")
def test_the_kernels_built_for_avx2_alone_pass_their_tests():
    done = subprocess.run([sys.executable, "-m", "tests.inference.avx2_kernels", "-p", "no:xdist"],
                          capture_output=True, text=True, timeout=900)

    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    built_with = done.stdout.splitlines()[0]
    assert built_with.startswith("our kernels built with -mavx2") and "avx512" not in built_with
    assert " passed" in done.stdout.splitlines()[-1]
