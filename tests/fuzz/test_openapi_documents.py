"""The OpenAPI descriptions the fuzz suite generates its requests from."""

import re

import pytest
import yaml
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from tests.fuzz.operations import DOCS_DIR, operations

pytestmark = pytest.mark.fuzz


@pytest.mark.parametrize("document", ["openapi-chat.yaml", "openapi-inference.yaml"])
def test_the_document_is_valid_openapi_3_1(document):
    spec = yaml.safe_load((DOCS_DIR / document).read_text())

    validate(spec)

    assert spec["openapi"].startswith("3.1")


def test_the_validator_refuses_a_parameter_without_its_place():
    spec = yaml.safe_load((DOCS_DIR / "openapi-chat.yaml").read_text())
    del spec["components"]["parameters"]["ConversationId"]["in"]

    with pytest.raises(OpenAPIValidationError):
        validate(spec)


def test_the_chat_document_names_every_api_route():
    from chatapp.urls import api_patterns

    documented = {key.split(" ", 1)[1] for key in operations("openapi-chat.yaml")}
    routes = {"/api/" + str(pattern.pattern).replace("<int:", "{").replace(">", "}")
              for pattern in api_patterns}

    assert documented == routes


def test_the_inference_document_names_every_route():
    from inference.config import InferenceConfig
    from inference.server import create_app
    from inference.service import InferenceService

    app = create_app(InferenceService(InferenceConfig()), load=False)
    # A parameter's convertor ({model:path}: an id holding slashes) is no part of its name.
    routes = {f"{method} {re.sub(r':[a-z]+}', '}', route.path)}" for route in app.routes
              for method in route.methods if method != "HEAD"}

    assert set(operations("openapi-inference.yaml")) == routes
