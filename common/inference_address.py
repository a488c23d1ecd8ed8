"""Where the inference service listens unless told otherwise, in one place: its own default
(inference/config.py), and the address INFERENCE_HOST and INFERENCE_PORT give it, which is the
app's default upstream (INFERENCE_URL) and what `make run` waits on before it says the stack is
ready."""

from common import env

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8001
# A service bound to every interface is reached on this machine through loopback.
_EVERY_INTERFACE = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def port() -> int:
    """INFERENCE_PORT."""
    return env.port("INFERENCE_PORT", DEFAULT_PORT)


def local_url() -> str:
    """The service INFERENCE_HOST and INFERENCE_PORT describe, as a client here reaches it."""
    host = env.string("INFERENCE_HOST", DEFAULT_HOST)
    host = _EVERY_INTERFACE.get(host, host)
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"http://{host}:{port()}"
