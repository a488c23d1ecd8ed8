"""A service's start keeps what timing its matrices chose at an earlier one on this machine
(inference/engine/matrix_choice.py) rather than timing them again (13 s of both cores at every
start of a 2-core AVX2 machine)."""

import pytest
import torch

from inference.engine import matrices, matrix_choice
from inference.engine.fused_llama import FusedLlama
from inference.engine.matrices import MatrixLayout
from tests.inference import models

pytestmark = pytest.mark.skipif(not matrices.can_dot(torch.ones(1, device=models.DEVICE)),
                                reason="needs our own kernel")


def timed_pass(built, inputs):
    """This machine's speeds, as the test sets them: ours the fastest layout, and faster than
    torch's product up to 32 rows."""
    rows = next(iter(inputs.values())).shape[0]
    if isinstance(built[0], matrices.DotMatrix):
        return 0.001 if rows <= 32 else 0.003
    return 0.002


def never_timed(built, inputs):
    raise AssertionError("the matrices were timed again")


@pytest.fixture
def new_process(monkeypatch, dot_row_limit):
    """What a new service process starts from: nothing measured, the default row limit."""
    def start():
        monkeypatch.setattr(matrices, "_measured_limits", {})
        dot_row_limit(torch.float32, matrices.LIMIT_ROWS[-1])
    return start


def test_a_second_start_takes_the_layout_and_row_limit_the_first_timed_without_timing_again(
        tmp_path, monkeypatch, new_process, dot_row_limit):
    monkeypatch.setattr(matrices, "_pass", timed_pass)
    new_process()
    first = FusedLlama(models.tiny_model("llama").float(), MatrixLayout.AUTO, tmp_path)
    first_limit = dot_row_limit(torch.float32)

    monkeypatch.setattr(matrices, "_pass", never_timed)
    new_process()
    second = FusedLlama(models.tiny_model("llama").float(), MatrixLayout.AUTO, tmp_path)

    assert first.layout is second.layout is MatrixLayout.DOT
    assert first_limit == dot_row_limit(torch.float32) == 32


def test_a_start_on_another_cpu_times_the_matrices_again(tmp_path, monkeypatch, new_process):
    timed = []
    monkeypatch.setattr(matrices, "_pass", lambda built, inputs: timed.append(1) or timed_pass(built, inputs))
    new_process()
    FusedLlama(models.tiny_model("llama").float(), MatrixLayout.AUTO, tmp_path)
    first = len(timed)

    monkeypatch.setattr(matrix_choice, "cpu_model", lambda: "another CPU")
    new_process()
    FusedLlama(models.tiny_model("llama").float(), MatrixLayout.AUTO, tmp_path)

    assert first > 0
    assert len(timed) == 2 * first


def test_a_kept_choice_that_cannot_be_read_is_timed_again_and_written_anew(tmp_path, monkeypatch, new_process):
    monkeypatch.setattr(matrices, "_pass", timed_pass)
    new_process()
    FusedLlama(models.tiny_model("llama").float(), MatrixLayout.AUTO, tmp_path)
    [kept] = (tmp_path / matrix_choice.FOLDER).iterdir()
    kept.write_text('{"layout": "sideways"')  # cut short: a disk that filled up

    new_process()
    again = FusedLlama(models.tiny_model("llama").float(), MatrixLayout.AUTO, tmp_path)

    assert again.layout is MatrixLayout.DOT
    assert '"layout": "dot"' in kept.read_text()


def test_a_named_layout_neither_reads_nor_writes_a_kept_choice(tmp_path, monkeypatch, new_process):
    monkeypatch.setattr(matrices, "_pass", timed_pass)
    new_process()
    FusedLlama(models.tiny_model("llama").float(), MatrixLayout.AUTO, tmp_path)
    before = {path: path.read_text() for path in tmp_path.rglob("*.json")}

    plain = FusedLlama(models.tiny_model("llama").float(), MatrixLayout.PLAIN, tmp_path)

    assert plain.layout is MatrixLayout.PLAIN
    assert {path: path.read_text() for path in tmp_path.rglob("*.json")} == before
