"""When `make run`'s stack is ready for its user: its address is printed once that address
answers through the whole path (nginx, a web process, the database) and the inference service
the stack started has loaded its model.

Printed before the children started, the address refused connections for the seconds nginx
waits for its web processes, and a first question could meet a model still loading.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx2

# Once, after this long without every check answering: what the stack still waits for.
LATE_S = 120.0
# Asked again after a pause that grows to the longest: each ask is a line of its server's log.
_FIRST_PAUSE_S, _LONGEST_PAUSE_S = 0.25, 2.0


@dataclass(frozen=True)
class Check:
    what: str  # "the app", "the inference service"
    url: str  # a health check: ready when it answers 200


@dataclass(frozen=True)
class Health:
    ready: bool
    error: str = ""  # why not, in the service's own words (its health check's "error"), when it says


def health(url: str) -> Health:
    """What `url` (a health check) answers: ready on 200. Asked directly: a proxy the
    environment names (HTTP_PROXY) would answer for a loopback address it cannot reach."""
    try:
        answer = httpx2.get(url, timeout=2, trust_env=False)
    except httpx2.HTTPError:
        return Health(False)
    if answer.status_code == 200:
        return Health(True)
    try:
        said = answer.json()
    except ValueError:
        return Health(False)
    return Health(False, str(said.get("error") or "") if isinstance(said, dict) else "")


def healthy(url: str) -> bool:
    return health(url).ready


@dataclass
class Announcer:
    """Says `ready` once every check answers, from a thread of its own (the supervisor's loop
    keeps restarting crashed children meanwhile); says at once each error a check answers with
    (the inference service's model failed to load: it answers 503 for good), and, once, what it
    still waits for after `late_s`, with why where the check says; says nothing after `stop()`."""

    checks: tuple[Check, ...]
    say: Callable[[str], None]
    ready: str
    late_s: float = LATE_S
    _stopped: threading.Event = field(default_factory=threading.Event, init=False)

    def start(self) -> None:
        threading.Thread(target=self._watch, daemon=True, name="readiness").start()

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        began, late_told, pause_s = time.monotonic(), False, _FIRST_PAUSE_S
        waiting, errors_told = list(self.checks), set()
        while waiting and not self._stopped.is_set():
            answers = {check: health(check.url) for check in waiting}
            waiting = [check for check, answer in answers.items() if not answer.ready]
            for check in waiting:
                if answers[check].error and (check, answers[check].error) not in errors_told:
                    errors_told.add((check, answers[check].error))
                    self.say(f"chatapp: {check.what} is not ready: {answers[check].error} ({check.url})")
            if waiting and not late_told and time.monotonic() - began >= self.late_s:
                late_told = True
                self.say("chatapp: still starting after {:g} s: waiting for {}".format(
                    self.late_s, "; ".join(_waited_for(check, answers[check]) for check in waiting)))
            if waiting:
                self._stopped.wait(pause_s)
                pause_s = min(pause_s * 2, _LONGEST_PAUSE_S)
        if not self._stopped.is_set():
            self.say(self.ready)


def _waited_for(check: Check, answer: Health) -> str:
    return f"{check.what} ({check.url}: {answer.error})" if answer.error else f"{check.what} ({check.url})"
