"""Fault injection: a web process that dies with a request in hand.

It reads each request's headers and closes the connection without a byte of answer, as a daphne
process killed at that moment would; a real one cannot be killed at that moment on cue.
"""

import socket
import threading


class VanishingWebProcess:
    """Use `with VanishingWebProcess() as vanishing:`; `vanishing.address` is its "host:port"."""

    def __init__(self):
        self.requests_read = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="vanishing-web-process", daemon=True)

    def __enter__(self) -> "VanishingWebProcess":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(), which then fails
        self._listener.close()
        self._thread.join(timeout=10)

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed by __exit__
                return
            with connection:
                received = b""
                while b"\r\n\r\n" not in received:
                    data = connection.recv(65536)
                    if not data:
                        break
                    received += data
                if b"\r\n\r\n" in received:
                    self.requests_read += 1
