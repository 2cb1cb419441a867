"""One session lifecycle, for headless runs, the dashboard's engine and the referee: open the
market, the SSH runner and the supervisor; prepare; at the end release (or detach), write
`campaign_end`, and close what it opened."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..core.campaign import Campaign
from ..core.policy import Policy
from ..ledger import EventKind, Ledger
from ..market.factory import open_market
from ..market.protocol import SharedClock
from .hosts.ssh import SSHRunner, load_or_create_key
from .supervisor import Supervisor


def default_key_path() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("rentwatch")) / "id_ed25519"


def artifacts_folder(campaign: Campaign) -> Path:
    """Where a campaign's artifacts land: its `artifacts_dir`, else the data directory's."""
    from platformdirs import user_data_dir

    if campaign.artifacts_dir:
        return Path(campaign.artifacts_dir).expanduser().resolve()
    return Path(user_data_dir("rentwatch")) / "artifacts"


class Session:
    def __init__(self, sup: Supervisor, owns_ledger: bool = False) -> None:
        self.sup = sup
        self.market = sup.market
        self.ledger = sup.ledger
        self.owns_ledger = owns_ledger  # close the ledger at the end (it was opened for us)
        self.artifacts_root = sup.job_work.pulls.artifacts_root
        self.ended = False
        self.end_marked = False

    @classmethod
    def open(
        cls,
        market_url: str,
        api_key: str,
        ledger: Ledger,
        campaign: Campaign,
        policy: Policy,
        key_path: Path | None = None,
        log: Callable[[str], None] = print,
        adopt_all: bool = False,
        owns_ledger: bool = False,
        artifacts_root: Path | None = None,
        http_timeout_s: float | None = None,
        observe_only: bool = False,
        market_clock: SharedClock | None = None,
    ) -> Session:
        """A session on the market at `market_url`. A call's deadline: `http_timeout_s`, else the
        campaign's, else the client's. `market_clock`: a simulator's clock in this process (the
        referee's stepped clock)."""
        timeout = http_timeout_s if http_timeout_s is not None else campaign.http_timeout_s
        client = open_market(market_url, api_key, timeout=timeout, clock=market_clock)
        ssh = SSHRunner(load_or_create_key(key_path or default_key_path()))
        if market_clock is not None:  # its SSH sessions hold the clock as its calls do
            ssh.hold = market_clock.held
            # and no keepalives: the simulator's hosts close their connections when they end,
            # and on a stepped clock a keepalive's timer would step the market
            ssh.keepalive_s = 0.0
        sup = Supervisor(
            client,
            ledger,
            campaign,
            policy,
            ssh,
            log=log,
            adopt_all=adopt_all,
            # (None: the campaign's folder, `artifacts_folder`)
            artifacts_root=artifacts_root or artifacts_folder(campaign),
            observe_only=observe_only,
        )
        return cls(sup, owns_ledger)

    async def start(self) -> Supervisor:
        """Sync the clock where the market has one to read (the simulator), then prepare."""
        if self.market.caps.market_clock:
            await self.market.sync_clock()
        await self.sup.prepare()
        return self.sup

    async def release(self, actor: str, reason: str) -> None:
        await self.sup.release_all(actor, reason)

    async def detach(self, reason: str) -> None:
        await self.sup.detach_all(reason)

    def mark_end(self, reason: str) -> None:
        """Write `campaign_end` (once): the ledger's figures stop there, so what is told of the
        end after this (a notice, the printed receipt) is one figure."""
        if not self.end_marked:
            self.end_marked = True
            self.sup.journal.fact(EventKind.CAMPAIGN_END, None, reason=reason)

    async def end(self, reason: str) -> None:
        """Write `campaign_end` (unless written) and close what the session opened (once)."""
        if self.ended:
            return
        self.ended = True
        try:
            self.mark_end(reason)
        finally:
            try:
                try:
                    await self.sup.close()
                finally:
                    await self.market.aclose()
            finally:  # a cancel during the awaits still closes the ledger (and its lock)
                if self.owns_ledger:
                    self.ledger.close()
