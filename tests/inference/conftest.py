import pytest
import torch

from inference.engine import own_kernels


@pytest.fixture
def dot_row_limit():
    """Sets the most rows our product multiplies at a precision (`dot_row_limit(dtype, rows)`)
    for one test: a model loaded in this process measured its own, which come back after."""
    if own_kernels.load() is not None:
        pytest.skip("needs our own kernel")
    before = {dtype: torch.ops.chatapp.dot_rows_limit(dtype) for dtype in own_kernels.dtypes()}
    yield lambda dtype, rows=None: torch.ops.chatapp.dot_rows_limit(dtype, rows)
    for dtype, rows in before.items():
        torch.ops.chatapp.dot_rows_limit(dtype, rows)
