"""An administrator's session on a PostgreSQL server, acting on one of its databases as an outage
would: ending its sessions (a restart, an administrator's command), and refusing new ones as a
server that is down or restarting does (ALTER DATABASE ... ALLOW_CONNECTIONS false) until they
are allowed again, at the latest when the `with` block ends. A database cannot refuse sessions
while connected to itself: the session is on the server's `postgres` database."""

from urllib.parse import urlsplit

import psycopg


class DatabaseAdministrator:
    def __init__(self, database_url: str):
        url = urlsplit(database_url)
        self.database = url.path.lstrip("/")
        self._session = psycopg.connect(url._replace(path="/postgres").geturl(), autocommit=True)
        self._refusing = False

    def end_sessions(self) -> int:
        """Ends every session on the database; how many there were."""
        return len(self._session.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            [self.database]).fetchall())

    def refuse_sessions(self) -> None:
        self._allow(False)

    def allow_sessions(self) -> None:
        self._allow(True)

    def _allow(self, allowed: bool) -> None:
        self._session.execute(f'ALTER DATABASE "{self.database}" ALLOW_CONNECTIONS {str(allowed).lower()}')
        self._refusing = not allowed

    def __enter__(self) -> "DatabaseAdministrator":
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._refusing:
                self.allow_sessions()
        finally:
            self._session.close()
