"""An administrator's session on a PostgreSQL server, acting on one of its databases as an outage
would: ending its sessions (a restart, an administrator's command), and refusing new ones as a
server that is down or restarting does (ALTER DATABASE ... ALLOW_CONNECTIONS false) until they
are allowed again, at the latest when the `with` block ends. A database cannot refuse sessions
while connected to itself: the session is on the server's `postgres` database.

The outage is the servers' (the app's web processes, its workers): the sessions of the process
that makes it (a test's, on any of its threads) go on."""

from urllib.parse import urlsplit

import psutil
import psycopg


class DatabaseAdministrator:
    def __init__(self, database_url: str):
        url = urlsplit(database_url)
        self.database = url.path.lstrip("/")
        self._server_port = url.port or 5432
        self._session = psycopg.connect(url._replace(path="/postgres").geturl(), autocommit=True)
        self._refusing = False

    def end_sessions(self) -> int:
        """Ends every session on the database but this process's own; how many there were."""
        return len(self._session.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s"
            " AND NOT coalesce(client_port = ANY(%s), false)",
            [self.database, self._own_client_ports()]).fetchall())

    def _own_client_ports(self) -> list[int]:
        """This process's sessions, told apart by their client ports (a Unix socket's have none)."""
        return [c.laddr.port for c in psutil.Process().net_connections("tcp")
                if c.raddr and c.raddr.port == self._server_port]

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
