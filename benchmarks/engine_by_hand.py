"""The service's engine loaded as the server loads it, for a benchmark to step by hand: no HTTP,
no event loop, no step thread (step_profile.py, gpu_probe.py)."""


def loaded(config):
    """The engine of an InferenceService on `config` (an InferenceConfig), its step thread stopped;
    every stream decodes to its max_tokens (end-of-turn tokens ignored)."""
    from inference.service import InferenceService

    service = InferenceService(config)
    service.load()
    service.stop()
    if service.engine is None:
        raise RuntimeError(f"the model did not load: {service.error!r}")
    service.engine.eos_token_ids = frozenset()
    return service.engine
