"""Our own product kernel (own_kernels.py, kernels/dot_rows.cpp) multiplies as torch does, for
every count of rows a step gives it, and a machine that cannot build it says why."""

import shutil

import pytest
import torch

from inference.engine import own_kernels

pytestmark = pytest.mark.skipif(own_kernels.load() is not None,
                                reason=f"the kernel cannot run here: {own_kernels.load()}")


# What each precision's sums may differ from float64's by: bfloat16's own rounding of the product.
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", own_kernels.dtypes(), ids=str)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 16, 64, 65, 100, 128, 129, 300, 512, 513])
def test_the_product_equals_torchs_for_every_count_of_rows(rows, dtype, dot_row_limit):
    # Widths off the kernel's vectors (8 to 32 elements) and 4-output tiles; 100 rows span two of
    # its row blocks at this width. Ours multiplies every count here.
    dot_row_limit(dtype, 1024)
    weight = torch.randn(963, 577, dtype=torch.float64)
    values = torch.randn(rows, 577, dtype=torch.float64)

    product = torch.ops.chatapp.dot_rows(values.to(dtype), weight.to(dtype))

    assert product.dtype == dtype
    expected = values.to(dtype).double() @ weight.to(dtype).double().t()
    torch.testing.assert_close(product.double(), expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype] * 10)


@pytest.mark.parametrize("dtype", own_kernels.dtypes(), ids=str)
def test_rows_past_the_limit_are_torchs_product_and_rows_within_it_ours(dtype, dot_row_limit):
    weight, values = torch.randn(963, 577, dtype=dtype), torch.randn(9, 577, dtype=dtype)
    dot_row_limit(dtype, 1024)
    ours = torch.ops.chatapp.dot_rows(values, weight)

    assert dot_row_limit(dtype, 8) == 8
    past, within = torch.ops.chatapp.dot_rows(values, weight), torch.ops.chatapp.dot_rows(values[:8], weight)

    assert torch.equal(past, torch.nn.functional.linear(values, weight))
    assert torch.equal(within, ours[:8])
    if dtype == torch.float32:  # the two sum in other orders (bfloat16's rounding hides it)
        assert not torch.equal(ours, past)


def test_the_widest_instructions_the_cpu_has_are_built_for():
    avx2 = {"avx2", "fma", "f16c"}
    avx512 = avx2 | {"avx512f", "avx512bw", "avx512vl"}

    bf16 = own_kernels.instruction_set(frozenset(avx512 | {"avx512_bf16"}))
    assert bf16.dtypes == (torch.float32, torch.bfloat16)
    assert bf16.screens == (torch.int8, torch.float16)
    assert own_kernels.instruction_set(frozenset(avx512)).screens == (torch.int8, torch.float16)
    assert "-mavx512f" in own_kernels.instruction_set(frozenset(avx512)).compile_flags
    assert own_kernels.instruction_set(frozenset(avx512)).dtypes == (torch.float32,)
    assert "-mavx512f" not in own_kernels.instruction_set(frozenset(avx2)).compile_flags
    assert own_kernels.instruction_set(frozenset(avx2)).screens == (torch.float16, torch.int8)
    assert own_kernels.instruction_set(frozenset({"sse4_2", "avx"})) is None
    assert own_kernels.instruction_set(frozenset(avx2 - {"f16c"})) is None


def test_rows_that_are_a_view_are_read_as_their_values():
    weight = torch.randn(64, 40)
    wide = torch.randn(3, 80)

    product = torch.ops.chatapp.dot_rows(wide[:, ::2], weight)

    torch.testing.assert_close(product, wide[:, ::2] @ weight.t(), rtol=1e-4, atol=1e-4)


def test_another_precision_or_a_mix_is_refused_with_a_clear_error():
    with pytest.raises(RuntimeError, match="both float32"):
        torch.ops.chatapp.dot_rows(torch.randn(1, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="both float32"):
        torch.ops.chatapp.dot_rows(torch.randn(1, 8, dtype=torch.bfloat16), torch.randn(4, 8))


@pytest.mark.process  # inductor starts the C++ compiler
def test_compiled_code_sees_the_products_shape_and_calls_the_kernel():
    weight = torch.randn(12, 24)

    compiled = torch.compile(lambda rows: torch.ops.chatapp.dot_rows(rows, weight) * 2, fullgraph=True)

    values = torch.randn(3, 24)
    torch.testing.assert_close(compiled(values), 2 * values @ weight.t(), rtol=1e-4, atol=1e-4)


@pytest.mark.process  # the compiler, which fails
def test_a_compiler_that_fails_leaves_no_library_behind_and_the_reason_is_given(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", "false")  # runs, and exits 1

    assert own_kernels._load(tmp_path).startswith(f"{shutil.which('false')} could not build it")
    # Neither the library nor a part of one: only the lock file the build was made under.
    assert [path.suffix for path in (tmp_path / "kernels").iterdir()] == [".lock"]


def test_without_a_compiler_the_kernel_is_not_built_and_the_reason_is_given(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", "no-such-compiler")

    assert own_kernels._load(tmp_path) == "no C++ compiler on PATH"
    assert not any(tmp_path.iterdir())
