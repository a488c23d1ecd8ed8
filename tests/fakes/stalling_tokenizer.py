"""Fault injection: a tokenizer that holds every prompt until the test releases it.

Stands in for a prompt so long that encoding it takes seconds, at a moment the test chooses.
The real tokenizer still encodes once released.
"""

import threading


class StallingTokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.entered = threading.Event()
        self.released = threading.Event()

    def apply_chat_template(self, *args, **kwargs):
        self.entered.set()
        self.released.wait()
        return self.tokenizer.apply_chat_template(*args, **kwargs)
