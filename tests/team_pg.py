"""A throwaway PostgreSQL cluster for the team store's tests: one per test session (per xdist
worker), made with the server's own `initdb` and `pg_ctl` from the Debian package's binaries,
listening on a free loopback port, gone at the end.

Without server binaries the tests that need it are skipped, except in CI (`CI=true`), where
that is a failure: `.ci/run` installs the `postgresql` package first.

initdb refuses to run as root: as root (CI), the cluster is made and run as the `postgres` user
the package creates, through `runuser`."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ADMIN = "rw_owner"  # the cluster's superuser: owns the store, runs `rentwatch team init`


@dataclass
class PgServer:
    bindir: Path
    data: Path
    port: int
    password: str
    as_user: list[str]  # the command prefix that runs a server binary as its owner

    def url(self, user: str = ADMIN, db: str = "postgres") -> str:
        """A URL without the password (which comes from PGPASSWORD or a file, as in use)."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{db}"

    def pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.data), *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> None:
        self.pg_ctl("-w", "-l", str(self.data / "server.log"), "start")

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("-w", "-m", mode, "stop")

    def kill9(self) -> None:
        """The postmaster killed with SIGKILL (its children follow when they notice)."""
        pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, 9)
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            subprocess.run(["sleep", "0.05"], check=False)

    def admin(self, sql: str, db: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.url(db=db), password=self.password, autocommit=True) as c:
            c.execute(sql)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class Unavailable(Exception):
    """No server binaries, or no user to run them as."""


def start_cluster() -> PgServer:
    """A new cluster in a temporary folder, started; `stop_cluster` ends and removes it."""
    bindir = _bindir()
    if bindir is None:
        raise Unavailable("no PostgreSQL server binaries (apt-get install postgresql)")
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="rw-pg-"))
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            raise Unavailable(
                "running as root and no `postgres` user to run the server as"
            ) from None
        os.chown(root, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    password = secrets.token_hex(12)
    pwfile = root / "pw"
    pwfile.write_text(password + "\n")
    if as_user:
        os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
    data = root / "data"
    subprocess.run(
        [
            *as_user,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            ADMIN,
            "--pwfile",
            str(pwfile),
            "--auth-host=scram-sha-256",
            "--auth-local=peer",
            "-E",
            "UTF8",
            "--no-instructions",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = free_port()
    with (data / "postgresql.conf").open("a") as f:
        f.write(
            f"\nport = {port}\nlisten_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{root}'\nfsync = off\nshared_buffers = 32MB\n"
        )
    server = PgServer(bindir, data, port, password, as_user)
    server.start()
    return server


def stop_cluster(server: PgServer) -> None:
    server.pg_ctl("-w", "-m", "immediate", "stop", check=False)
    shutil.rmtree(server.data.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    try:
        server = start_cluster()
    except Unavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL is needed in CI: {exc}")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        stop_cluster(server)


@pytest.fixture
def team_db(pg_server: PgServer) -> Iterator[str]:
    """A fresh database on the session's server, for one test; its name."""
    name = f"team_{secrets.token_hex(4)}"
    pg_server.admin(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        try:
            pg_server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        except Exception:  # the server may be down at the end of a fault test
            pass
