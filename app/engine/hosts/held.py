"""SSH connections kept open to rented hosts, one per (instance, route), each command a session
(a channel) on it, as OpenSSH's ControlMaster keeps one: the key exchange, the host key's
signature and the login happen once per connection, not once per command."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import asyncssh

Key = tuple[int, str | None, int]  # instance id, host, port


@dataclass(eq=False)
class Held:
    """One connection, and the sessions on it now. A dropped one is out of the pool: it closes
    once its last session ends (a session under way on it is never cut by another's failure)."""

    key: Key
    conn: asyncssh.SSHClientConnection
    users: int = 0
    dropped: bool = False

    def live(self) -> bool:
        return not self.dropped and not self.conn.is_closed()

    def enter(self) -> None:
        self.users += 1

    def leave(self) -> None:
        self.users -= 1
        if self.dropped and self.users == 0:
            self.conn.close()


class Pool:
    """The connections held, by instance and route (host and port)."""

    def __init__(self) -> None:
        self.by_instance: dict[int, dict[tuple[str | None, int], Held]] = {}
        # dropped ones that may not have closed yet, for `SSHRunner.close` to wait on
        self.closing: list[asyncssh.SSHClientConnection] = []

    def reusable(self, key: Key) -> Held | None:
        """The live connection held for `key`; one the host or a lost keepalive closed is
        dropped here, so the next command connects again."""
        held = self.by_instance.get(key[0], {}).get(key[1:])
        if held is None or held.live():
            return held
        self.drop(held)
        return None

    def keep(self, key: Key, conn: asyncssh.SSHClientConnection) -> Held:
        """A new connection, held for `key`; where a live one is held already (two commands
        connected at once), that one serves and the new one is closed."""
        held = self.reusable(key)
        if held is not None:
            self.drop(Held(key, conn))
            return held
        held = self.by_instance.setdefault(key[0], {})[key[1:]] = Held(key, conn)
        return held

    def drop(self, held: Held) -> None:
        """Out of the pool (dead, or suspect: a command timed out on it, a session failed);
        closed now, or once the sessions under way on it end."""
        routes = self.by_instance.get(held.key[0], {})
        if routes.get(held.key[1:]) is held:
            del routes[held.key[1:]]
            if not routes:
                del self.by_instance[held.key[0]]
        held.dropped = True
        if held.users == 0:
            held.conn.close()
        self.closing = [c for c in self.closing if not c.is_closed()] + [held.conn]

    def forget(self, instance_id: int, keep: Collection[tuple[str | None, int]] = ()) -> None:
        """Drop the instance's connections, but those on a route in `keep`."""
        for route, held in list(self.by_instance.get(instance_id, {}).items()):
            if route not in keep:
                self.drop(held)

    def instances(self) -> set[int]:
        return set(self.by_instance)
