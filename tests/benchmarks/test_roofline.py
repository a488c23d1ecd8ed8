"""The roofline's byte count is every weight a decode step reads: the model's own parameters."""

from benchmarks import roofline
from tests.inference import models


def test_the_weights_one_token_reads_are_every_parameter_of_a_tied_llama_once():
    model = models.tiny_model()
    parameters = {id(p): p for p in model.parameters()}.values()  # the tied embedding once

    expected = sum(p.numel() * p.element_size() for p in parameters)

    assert roofline.weight_bytes(model.config, element_size=8) == expected


def test_a_step_that_reads_the_output_matrix_through_a_narrower_screen_reads_that_many_bytes_fewer():
    model = models.tiny_model()
    config = model.config
    narrower = config.vocab_size * config.hidden_size * (4 - 2)

    assert roofline.weight_bytes(config, 4, head_element_size=2) == roofline.weight_bytes(config, 4) - narrower
