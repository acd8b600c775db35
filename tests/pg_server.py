"""A throwaway PostgreSQL for tests: Debian's postgresql binaries, a cluster in a temp dir, a unix socket only.

    def test_x(pg_url):      # a fresh, empty database on the session's server (fixture of tests/conftest.py)
        ...

`initdb` refuses to run as root, so when the tests run as root the cluster belongs to the `postgres`
system user (created by Debian's postgresql-common package; commands run through `runuser -u postgres`).
The server listens on a unix socket in its temp dir only (no TCP), on a port number that was free, and
`pg_ctl -w` waits until it accepts connections (no sleeps). It is stopped and deleted after the session.
Tests are skipped, with the reason, when the binaries are missing (CI installs `postgresql`).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

PG_USER = "postgres"  # the system user that owns the cluster when the tests run as root


def pg_bin() -> Path | None:
    """The newest installed `/usr/lib/postgresql/N/bin` with initdb and pg_ctl (or $TUNER_PG_BIN)."""
    cands = [os.environ.get("TUNER_PG_BIN", "")] + sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name or 0), reverse=True
    )
    for c in cands:
        if c and all(os.access(Path(c) / b, os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return Path(c)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """A running cluster: `url` connects as the superuser `tuner` to database `postgres` over the socket."""

    bindir: Path
    root: Path
    port: int
    as_user: str | None

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://tuner@/{dbname}?host={self.root}&port={self.port}"

    def _run(self, *args: str) -> None:
        cmd = [str(a) for a in args]
        if self.as_user:
            cmd = ["runuser", "-u", self.as_user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            log = (
                (self.root / "server.log").read_text(errors="replace")[-2000:]
                if (self.root / "server.log").exists()
                else ""
            )
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}\n{log}")

    def init(self) -> None:
        self._run(self.bindir / "initdb", "-D", self.data, "-U", "tuner", "--auth=trust", "-E", "UTF8", "--no-sync")

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses='' -c fsync=on"
        self._run(self.bindir / "pg_ctl", "-D", self.data, "-o", opts, "-l", self.root / "server.log", "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(self.bindir / "pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def create_db(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def start_pg() -> PgServer:
    """Init and start a cluster in a new temp dir (skips the test when PostgreSQL is not installed)."""
    bindir = pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (Debian: apt-get install postgresql)")
    as_user = None
    root = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
    if os.geteuid() == 0:  # initdb will not run as root
        try:
            pw = pwd.getpwnam(PG_USER)
        except KeyError:
            shutil.rmtree(root, ignore_errors=True)
            pytest.skip(f"running as root and no {PG_USER!r} system user to own a PostgreSQL cluster")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        as_user = PG_USER
    root.chmod(0o755)
    server = PgServer(bindir, root, _free_port(), as_user)
    server.init()
    server.start()
    return server
