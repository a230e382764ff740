"""Throwaway servers for the tests and the benchmark: a PostgreSQL in a temporary directory, from Debian's packages,
and `smartio serve` processes on loopback.

initdb refuses to run as root, so as root the cluster belongs to `nobody`. It listens on 127.0.0.1 only, on a free
port, with trust authentication for local connections (nothing else can reach it), and is removed on stop().
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def pg_bindir() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian: /usr/lib/postgresql/N/bin), or None."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    if dirs:
        return Path(dirs[-1]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


class TempPostgres:
    """initdb, pg_ctl start on 127.0.0.1:PORT; url is the libpq URL of its `postgres` database."""

    def __init__(self) -> None:
        bindir = pg_bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL's initdb is not installed (Debian package postgresql)")
        self.bindir = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="smartio-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.user = "smartio"
        self.url = f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"
        self._as: list[str] = []
        if os.geteuid() == 0:
            os.chown(self.dir, 65534, 65534)
            self._as = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

    def _run(self, *cmd: str, timeout: float = 120) -> None:
        proc = subprocess.run([*self._as, *cmd], capture_output=True, text=True, timeout=timeout, cwd=self.dir)
        if proc.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}")

    def start(self) -> TempPostgres:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust",
                  "--no-sync", "-E", "UTF8", "--locale=C")
        opts = (f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.dir} "
                "-c fsync=on -c max_connections=200 -c shared_buffers=64MB")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"), "-o", opts,
                  "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop", timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)

    def new_database(self, name: str) -> str:
        """A fresh empty database in this server; its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}"')
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + "/" + name


@contextlib.contextmanager
def temp_postgres() -> Iterator[TempPostgres]:
    pg = TempPostgres()
    try:
        yield pg.start()
    finally:
        pg.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`smartio serve --db DB` on 127.0.0.1:PORT, started and stopped by a test or the benchmark; its output goes
    to a temporary file (log() reads it), so that a full pipe never stalls it."""

    def __init__(self, db: str, workers: int = 1, max_body: int = 262144, port: int | None = None) -> None:
        self.db, self.workers, self.max_body = db, workers, max_body
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.out = tempfile.TemporaryFile()

    def start(self, timeout_s: float = 60) -> Server:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "smartio", "serve", "--db", self.db, "--no-import", "--port", str(self.port),
             "--min-runs", "1", "--workers", str(self.workers), "--max-body", str(self.max_body)],
            stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"smartio serve did not start on port {self.port}: "
                                       f"{self.log()[-2000:]}") from None
                time.sleep(0.05)

    def log(self) -> str:
        self.out.seek(0)
        return self.out.read().decode(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
