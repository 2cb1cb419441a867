"""The team store over psycopg 3: what a controller ships, what it pulls, its heartbeats, and what
`reconcile --team` and `ls --team` read. Every call raises `StoreUnavailable` when the server is
unreachable or slow, with the driver's message and never the password."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from ...core.errors import RentwatchError
from ..event import EVENT_COLUMNS
from .chain import Finding, verify
from .config import TeamConfig
from .migrations import CONTROLLER_ROLE, MIGRATIONS, SCHEMA, SCHEMA_VERSION, role_sql

CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_MS = 15_000  # a slow server fails a sync round; the next round tries again
LIVE_S = 90  # a controller whose last heartbeat is older is not listed as live

_COLS = ", ".join(EVENT_COLUMNS)


class StoreUnavailable(RentwatchError):
    title = "team store unavailable"


class StoreRefused(RentwatchError):
    title = "team store refused"


@dataclass(frozen=True)
class Controller:
    operator: str
    campaign: str | None
    host: str
    pid: int
    last_seen: float  # epoch seconds (the server's clock)
    ledger_id: str
    age_s: float = 0.0  # since its last heartbeat (the server's clock)

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "age_s"}


def _known(version: int) -> int:
    if version > SCHEMA_VERSION:
        raise StoreRefused(
            f"the store has schema {version}; this rentwatch knows up to {SCHEMA_VERSION}"
        )
    return version


def _scrub(text: str, secret: str | None) -> str:
    text = str(text).splitlines()[0] if str(text) else ""
    return text.replace(secret, "***") if secret else text


class TeamStore:
    """One connection to the store, opened on first use and again after a failure."""

    def __init__(self, config: TeamConfig) -> None:
        self.config = config
        self._conn: Any = None
        self._secret: str | None = None

    # -- the connection ------------------------------------------------------------------
    def _connect(self) -> Any:
        import psycopg

        if self._conn is not None and not self._conn.closed:
            return self._conn
        kwargs = self.config.connect_kwargs()
        self._secret = kwargs.get("password")
        try:
            self._conn = psycopg.connect(
                self.config.url,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name="rentwatch",
                options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
                **kwargs,
            )
        except psycopg.Error as exc:
            raise StoreUnavailable(_scrub(str(exc), self._secret)) from None
        return self._conn

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """A cursor in one transaction; any driver error closes the connection (the next call
        opens a fresh one) and comes out as StoreUnavailable, or StoreRefused for a refusal."""
        import psycopg

        conn = self._connect()
        try:
            with conn.transaction(), conn.cursor() as cur:
                yield cur
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self.close()
            raise StoreUnavailable(_scrub(str(exc), self._secret)) from None
        except psycopg.Error as exc:
            self.close()
            raise StoreRefused(_scrub(str(exc), self._secret)) from None

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a connection the server already dropped
                self._conn.close()
            self._conn = None

    # -- the schema ----------------------------------------------------------------------
    def check_schema(self) -> None:
        """Refuse a store with no rentwatch schema, or a newer one than this rentwatch knows."""
        with self._tx() as cur:
            cur.execute("SELECT to_regclass(%s)", [f"{SCHEMA}.migrations"])
            row = cur.fetchone()
            if row is not None and row[0] is not None:
                cur.execute(f"SELECT coalesce(max(version), 0) FROM {SCHEMA}.migrations")
                row = cur.fetchone()
        if row is None or not row[0]:
            raise StoreRefused(
                f"{self.config.url} holds no rentwatch store: its owner runs "
                "`rentwatch team init URL` once"
            )
        _known(int(row[0]))

    def init(self, grant: Sequence[str] = ()) -> list[int]:
        """Make or migrate the store (as its owner) and the controller role; grant that role
        to each login role in `grant`. Returns the versions applied now."""
        import psycopg
        from psycopg import sql

        applied = []
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('rentwatch.migrations'))")
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {SCHEMA}.migrations (version INTEGER PRIMARY KEY, "
                "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            cur.execute(f"SELECT coalesce(max(version), 0) FROM {SCHEMA}.migrations")
            row = cur.fetchone()
            have = _known(int(row[0]) if row else 0)
            for v in range(have + 1, SCHEMA_VERSION + 1):
                cur.execute(MIGRATIONS[v])
                cur.execute(f"INSERT INTO {SCHEMA}.migrations (version) VALUES (%s)", [v])
                applied.append(v)
            for stmt in role_sql():
                cur.execute(stmt)
            for user in grant:
                try:
                    cur.execute(
                        sql.SQL("GRANT {} TO {}").format(
                            sql.Identifier(CONTROLLER_ROLE), sql.Identifier(user)
                        )
                    )
                except psycopg.errors.UndefinedObject:
                    raise StoreRefused(
                        f"no role {user!r} to grant the controller role to"
                    ) from None
        return applied

    # -- a controller's side -------------------------------------------------------------
    def head(self, ledger_id: str) -> tuple[int, str | None]:
        """How far this ledger's events are in the store: (last seq, its hash) or (0, None)."""
        with self._tx() as cur:
            cur.execute(
                f"SELECT seq, hash FROM {SCHEMA}.events WHERE ledger_id = %s "
                "ORDER BY seq DESC LIMIT 1",
                [ledger_id],
            )
            row = cur.fetchone()
        return (int(row[0]), str(row[1])) if row else (0, None)

    def ship(
        self,
        ledger_id: str,
        operator: str,
        rows: Sequence[tuple[Sequence[Any], str, str]],
    ) -> None:
        """Store events in one transaction; one already there (sent again after a crash) is kept."""
        marks = ", ".join(["%s"] * (len(EVENT_COLUMNS) + 4))
        with self._tx() as cur:
            cur.execute(
                f"INSERT INTO {SCHEMA}.ledgers (ledger_id, operator) VALUES (%s, %s) "
                "ON CONFLICT (ledger_id) DO NOTHING",
                [ledger_id, operator],
            )
            cur.executemany(
                f"INSERT INTO {SCHEMA}.events (ledger_id, operator, {_COLS}, prev_hash, hash) "
                f"VALUES ({marks}) ON CONFLICT (ledger_id, seq) DO NOTHING",
                [[ledger_id, operator, *fields, prev, h] for fields, prev, h in rows],
            )

    def ledgers(self) -> list[tuple[str, str]]:
        """Every ledger that shipped to the store: (ledger id, operator)."""
        with self._tx() as cur:
            cur.execute(f"SELECT ledger_id, operator FROM {SCHEMA}.ledgers ORDER BY first_seen")
            return [(str(a), str(b)) for a, b in cur.fetchall()]

    def pull_all(
        self, ledger_id: str, after: int, batch: int, extra: str = "hash"
    ) -> Iterator[list[tuple[Any, ...]]]:
        """One ledger's events after `after`, in order, `batch` at a time to its last (an empty
        batch at most once): (fields..., then the `extra` columns)."""
        while True:
            with self._tx() as cur:
                cur.execute(
                    f"SELECT {_COLS}, {extra} FROM {SCHEMA}.events WHERE ledger_id = %s "
                    "AND seq > %s ORDER BY seq LIMIT %s",
                    [ledger_id, after, batch],
                )
                rows = [tuple(r) for r in cur.fetchall()]
            yield rows
            if len(rows) < batch:
                return
            after = int(rows[-1][0])

    def beat(
        self,
        ledger_id: str,
        operator: str,
        campaign: str | None,
        host: str,
        pid: int,
        shipped_seq: int,
        ended: bool = False,
    ) -> None:
        with self._tx() as cur:
            cur.execute(
                f"INSERT INTO {SCHEMA}.heartbeats (ledger_id, operator, campaign, host, pid, "
                "shipped_seq, ended) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [ledger_id, operator, campaign, host, pid, shipped_seq, ended],
            )

    # -- what the team reads -------------------------------------------------------------
    def live_controllers(self, live_s: float = LIVE_S) -> list[Controller]:
        """Controllers whose latest heartbeat is recent (the server's clock) and did not say it
        ended."""
        with self._tx() as cur:
            cur.execute(
                f"""SELECT operator, campaign, host, pid, extract(epoch FROM at), ledger_id,
                       extract(epoch FROM now() - at)
                FROM (SELECT DISTINCT ON (ledger_id, host, pid) * FROM {SCHEMA}.heartbeats
                      WHERE at > now() - make_interval(secs => %s)
                      ORDER BY ledger_id, host, pid, at DESC) b
                WHERE NOT ended ORDER BY operator, campaign, host, pid""",
                [live_s],
            )
            rows = cur.fetchall()
        return [
            Controller(str(o), c, str(h), int(p), float(t), str(lid), float(a))
            for o, c, h, p, t, lid, a in rows
        ]

    def hashes(self, ledger_id: str) -> dict[int, tuple[str, str]]:
        """One ledger's events in the store: seq -> (hash, operator)."""
        with self._tx() as cur:
            cur.execute(
                f"SELECT seq, hash, operator FROM {SCHEMA}.events WHERE ledger_id = %s",
                [ledger_id],
            )
            return {int(a): (str(b), str(c)) for a, b, c in cur.fetchall()}

    def check_chains(self, batch: int = 20_000) -> tuple[int, int, list[Finding]]:
        """Every ledger's chain checked: (ledgers, events, findings)."""
        findings: list[Finding] = []
        n_events = 0
        with self._tx() as cur:
            # each ledger, how far its controller said it shipped, and who inserted its events
            cur.execute(
                f"""SELECT ledger_id, operator,
                       (SELECT coalesce(max(shipped_seq), 0) FROM {SCHEMA}.heartbeats h
                        WHERE h.ledger_id = l.ledger_id),
                       (SELECT array_agg(DISTINCT db_user ORDER BY db_user) FROM {SCHEMA}.events e
                        WHERE e.ledger_id = l.ledger_id)
                FROM {SCHEMA}.ledgers l ORDER BY first_seen"""
            )
            ledgers = cur.fetchall()
        for ledger_id, operator, shipped, users in ledgers:
            if users and len(users) > 1:
                why = f"its events were inserted by several roles: {', '.join(users)}"
                findings.append(Finding(operator, ledger_id, 0, "foreign", why))
            n = len(EVENT_COLUMNS)
            rows = [
                (r[:n], str(r[n]), str(r[n + 1]), str(r[n + 2]))
                for page in self.pull_all(ledger_id, 0, batch, "prev_hash, hash, operator")
                for r in page
            ]
            n_events += len(rows)
            findings += verify(ledger_id, operator, rows, shipped)
        return len(ledgers), n_events, findings
