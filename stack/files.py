"""Where a stack keeps its files: one directory under var/stacks/ per public port.

Two stacks of one checkout (CI's two workers, or two `make run` on different ports) must not
share any of them: nginx reads its configuration again at each restart, long after the start,
and had read the other stack's (stop 58); the supervisor's pid files name the children an
operator would signal; Celery beat's schedule is a database that one beat writes."""

from dataclasses import dataclass
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent  # the checkout: the stack runs from it


@dataclass(frozen=True)
class StackFiles:
    public_port: int

    @property
    def root(self) -> Path:
        return REPO_DIR / "var" / "stacks" / str(self.public_port)

    @property
    def nginx(self) -> Path:
        """nginx's configuration as rendered for this stack, its pid file and temporary files."""
        return self.root / "nginx"

    @property
    def pids(self) -> Path:
        """<name>.pid for each running child."""
        return self.root / "run"

    @property
    def beat_schedule(self) -> Path:
        return self.root / "celerybeat-schedule"
