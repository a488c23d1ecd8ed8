"""Our own product kernel (dot_kernel.py, kernels/dot_rows.cpp) multiplies as torch does, for
every count of rows a step gives it, and a machine that cannot build it says why."""

import shutil

import pytest
import torch

from inference.engine import dot_kernel

pytestmark = pytest.mark.skipif(dot_kernel.load() is not None,
                                reason=f"the kernel cannot run here: {dot_kernel.load()}")


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 16, 64, 100, 128, 129, 300])
def test_the_product_equals_torchs_for_every_count_of_rows(rows):
    # Widths off the kernel's 8-float vectors and 4-output tiles; 100 rows span two of its row
    # blocks at this width, and above 128 torch's own product takes over.
    weight = torch.randn(963, 577)
    values = torch.randn(rows, 577)

    product = torch.ops.chatapp.dot_rows(values, weight)

    torch.testing.assert_close(product, values @ weight.t(), rtol=1e-4, atol=1e-4)


def test_rows_that_are_a_view_are_read_as_their_values():
    weight = torch.randn(64, 40)
    wide = torch.randn(3, 80)

    product = torch.ops.chatapp.dot_rows(wide[:, ::2], weight)

    torch.testing.assert_close(product, wide[:, ::2] @ weight.t(), rtol=1e-4, atol=1e-4)


def test_another_precision_is_refused_with_a_clear_error():
    with pytest.raises(RuntimeError, match="float32 only"):
        torch.ops.chatapp.dot_rows(torch.randn(1, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64))


@pytest.mark.process  # inductor starts the C++ compiler
def test_compiled_code_sees_the_products_shape_and_calls_the_kernel():
    weight = torch.randn(12, 24)

    compiled = torch.compile(lambda rows: torch.ops.chatapp.dot_rows(rows, weight) * 2, fullgraph=True)

    values = torch.randn(3, 24)
    torch.testing.assert_close(compiled(values), 2 * values @ weight.t(), rtol=1e-4, atol=1e-4)


@pytest.mark.process  # the compiler, which fails
def test_a_compiler_that_fails_leaves_no_library_behind_and_the_reason_is_given(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", "false")  # runs, and exits 1

    assert dot_kernel._load(tmp_path).startswith(f"{shutil.which('false')} could not build it")
    assert not any((tmp_path / "kernels").iterdir())


def test_without_a_compiler_the_kernel_is_not_built_and_the_reason_is_given(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", "no-such-compiler")

    assert dot_kernel._load(tmp_path) == "no C++ compiler on PATH"
    assert not any(tmp_path.iterdir())
