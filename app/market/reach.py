"""Whether the market can be used at all, asked once before anything is created or recorded, and a
failure said as one line naming the address and the cause (network, key, refusal), so an
unreachable market leaves no ledger, log or SSH key behind."""

from __future__ import annotations

from ..core.errors import MalformedAnswer, RentwatchError
from .errors import ApiError, AuthError, MarketUnavailable, network_cause


class MarketUnreachable(RentwatchError):
    """The market cannot be used: its message is the whole line a person reads."""

    title = "cannot use the market"
    whole_line = True


def market_failure(url: str, exc: BaseException) -> MarketUnreachable:
    """`exc` (what a call to the market at `url` raised) as the one line a person reads."""
    if isinstance(exc, AuthError):
        return MarketUnreachable(f"cannot use the market at {url} (key: {exc.msg})")
    if isinstance(exc, ApiError):
        return MarketUnreachable(f"cannot use the market at {url} (refused: {exc})")
    if isinstance(exc, MarketUnavailable):
        if exc.network is not None:
            return MarketUnreachable(f"cannot reach the market at {url} (network: {exc.network})")
        return MarketUnreachable(f"cannot use the market at {url} (unavailable: {exc})")
    if isinstance(exc, MalformedAnswer):
        return MarketUnreachable(f"cannot use the market at {url} (not a market's answer: {exc})")
    # a URL the HTTP library cannot use at all (no scheme, a bad port)
    return MarketUnreachable(f"cannot reach the market at {url} (address: {network_cause(exc)})")


async def check_market(url: str, key: str, timeout: float | None) -> None:
    """One authenticated read (the account's SSH keys, the engine's own first call), with the
    retries the engine would make; raises `MarketUnreachable` when it does not succeed."""
    import httpx

    from .vast.client import VastClient

    try:
        async with VastClient(url, key, timeout=timeout) as client:
            await client.ssh_keys()
    except (RentwatchError, httpx.HTTPError, ValueError) as exc:
        raise market_failure(url, exc) from None
