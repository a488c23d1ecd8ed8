"""Fault injection: a tokenizer that holds prompts until the test releases them.

Stands in for a prompt so long that encoding it takes seconds, at a moment the test chooses.
The real tokenizer still encodes once released.
"""

import os
import threading


class StallingTokenizer:
    def __init__(self, tokenizer, held: int | None = None):
        """Holds the first `held` prompts (every one when None); the rest go straight through."""
        self.tokenizer = tokenizer
        self.entered = threading.Event()
        self.released = threading.Event()
        self._left_to_hold = held
        self._lock = threading.Lock()
        self.niceness: list[int] = []  # the CPU niceness of the thread of each prompt, in turn

    def __deepcopy__(self, memo):
        # Each encoding thread copies the engine's tokenizer: every copy is this one stall.
        return self

    def apply_chat_template(self, *args, **kwargs):
        self.niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        if self._holds_this_one():
            self.entered.set()
            self.released.wait()
        return self.tokenizer.apply_chat_template(*args, **kwargs)

    def _holds_this_one(self) -> bool:
        with self._lock:
            if self._left_to_hold is None:
                return True
            holds = self._left_to_hold > 0
            self._left_to_hold -= holds
            return holds
