"""A throw-away PostgreSQL server for the tests and benchmarks: initdb into a temp dir, a free
port, loopback only.

psycopg (the ``postgres`` extra) is imported when a server starts, not with this module: the
tests that need no PostgreSQL run with the ``dev`` extra alone.

``STOMPMQ_TEST_POSTGRES_URL`` (a superuser's URL) names an existing server instead.  When the
tests run as root, the server runs as the ``postgres`` user (PostgreSQL refuses root).  Each
test gets a database of its own, cloned from a template migrated once, so a test starts
from an empty, current schema in milliseconds.  The broker connects as ``stompmq`` with a
password over TCP (scram-sha-256), so the tests also see that the password never leaks.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from stompmq.storage.migrate import upgrade_to_head

from .broker_process import free_port
from .waiting import pace

#: The role the broker logs in as, and its password (the masking tests look for it).
USER = "stompmq"
PASSWORD = "s3cret-pw"
TEMPLATE = "stompmq_template"
#: Seconds pg_ctl waits for the server to start or stop.
PG_CTL_WAIT = 60

_databases = itertools.count(1)


def _binary(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (Debian: apt-get install postgresql)")
    return found


class PostgresServer:
    """One server for the whole test session."""

    def __init__(self, *, durable: bool = False) -> None:
        # Tests never crash the machine, so they run without fsync; benchmarks run durable.
        self.durable = durable
        self.admin_url = os.environ.get("STOMPMQ_TEST_POSTGRES_URL", "")
        self.owned = not self.admin_url
        self.directory: Path | None = None
        self.port = 0
        self._run_as: list[str] = []

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> PostgresServer:
        import psycopg

        if self.owned:
            self._start_own()
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (USER,)).fetchone():
                conn.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
            conn.execute(f"CREATE DATABASE {TEMPLATE} OWNER {USER}")
        upgrade_to_head(self.url(TEMPLATE).replace("postgresql://", "postgresql+psycopg://"))
        return self

    def _start_own(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="stompmq-pg-"))
        data = self.directory / "data"
        self.port = free_port()
        if os.geteuid() == 0:
            postgres = pwd.getpwnam("postgres")
            os.chown(self.directory, postgres.pw_uid, postgres.pw_gid)
            self._run_as = ["runuser", "-u", "postgres", "--"]
        self._pg("initdb", "-D", str(data), "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256",
                 "-E", "UTF8", "--no-locale")
        with open(data / "pg_hba.conf", "w") as hba:
            hba.write("local all all trust\nhost all postgres 127.0.0.1/32 trust\n"
                      "host all all 127.0.0.1/32 scram-sha-256\n")
        # In the configuration file, not on pg_ctl's command line, so that restart() keeps them.
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.directory}'\n"
                "max_connections = 200\nshared_buffers = 128MB\n"
                + ("" if self.durable else "fsync = off\nfull_page_writes = off\n")
            )
        self._pg("pg_ctl", "-D", str(data), "-l", str(self.directory / "log"), "-w", "-t", str(PG_CTL_WAIT), "start")
        self.admin_url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg(self, tool: str, *args: str) -> None:
        result = subprocess.run([*self._run_as, _binary(tool), *args], capture_output=True, text=True,
                                timeout=PG_CTL_WAIT + 30)
        if result.returncode:
            raise RuntimeError(f"{tool} failed: {result.stderr or result.stdout}")

    def stop(self) -> None:
        if self.owned and self.directory is not None:
            try:
                self._pg("pg_ctl", "-D", str(self.directory / "data"), "-m", "immediate", "-w", "stop")
            finally:
                shutil.rmtree(self.directory, ignore_errors=True)

    def restart(self, mode: str = "fast", down: float = 0.0) -> None:
        """Stop the server (``immediate`` = as a crash would), leave it down ``down`` more
        seconds, and start it again."""
        assert self.owned and self.directory is not None, "only a server the tests started can be restarted"
        data = str(self.directory / "data")
        self._pg("pg_ctl", "-D", data, "-m", mode, "-w", "stop")
        pace(down)  # the outage asked for: its length is the point
        self._pg("pg_ctl", "-D", data, "-l", str(self.directory / "log"), "-w", "-t", str(PG_CTL_WAIT), "start")

    def postmaster_pid(self) -> int | None:
        """The server's main process (the benchmarks add up its CPU); None for a server not started here."""
        if not self.owned or self.directory is None:
            return None
        return int((self.directory / "data" / "postmaster.pid").read_text().split()[0])

    # -- databases ---------------------------------------------------------------------------
    def url(self, database: str) -> str:
        host = self.admin_url.split("@", 1)[1].split("/", 1)[0]
        return f"postgresql://{USER}:{PASSWORD}@{host}/{database}"

    def new_database(self) -> str:
        """A fresh, migrated, empty database; its URL (as the broker's user)."""
        import psycopg

        name = f"t{os.getpid()}_{next(_databases)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE} OWNER {USER}")
        return self.url(name)
