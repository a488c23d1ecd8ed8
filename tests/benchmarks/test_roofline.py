"""The roofline's byte count is every weight a decode step reads: the model's own parameters."""

from benchmarks import roofline
from tests.inference import models


def test_the_weights_one_token_reads_are_every_parameter_of_a_tied_llama_once():
    model = models.tiny_model()
    parameters = {id(p): p for p in model.parameters()}.values()  # the tied embedding once

    expected = sum(p.numel() * p.element_size() for p in parameters)

    assert roofline.weight_bytes(model.config, element_size=8) == expected
