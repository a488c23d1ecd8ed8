"""`python -m tests.inference.avx2_kernels [pytest args]`: the kernels' tests against our library
built for AVX2 alone (own_kernels.INSTRUCTION_SETS narrowed before it loads), on a CPU that also
has AVX-512. Run by test_kernels_built_for_avx2.py in a process of its own: one process loads one
build of the library."""

import sys

import pytest

from inference.engine import own_kernels

# The test files of our kernels, and the one test that asks for the widest build.
FILES = ("tests/inference/test_dot_kernel.py", "tests/inference/test_decode_attention.py",
         "tests/inference/test_native_step.py", "tests/inference/test_output_screen.py",
         "tests/inference/test_sampler.py")
WIDEST = "test_the_widest_instructions_the_cpu_has_are_built_for"


def main(argv: list[str]) -> int:
    own_kernels.INSTRUCTION_SETS = tuple(each for each in own_kernels.INSTRUCTION_SETS
                                         if "avx512f" not in each.cpu_flags)
    why_not = own_kernels.load()
    if why_not is not None:
        print(f"our kernels were not built for AVX2: {why_not}")
        return 1
    print(f"our kernels built with {' '.join(own_kernels.instruction_set(own_kernels.cpu_flags()).compile_flags)}")
    return pytest.main(["-q", "-p", "no:cacheprovider", "-k", f"not {WIDEST}", *FILES, *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
