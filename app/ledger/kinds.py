"""The ledger's vocabulary: every event kind, as an enum (a StrEnum, so it is stored and
compared as its text and old ledgers read unchanged)."""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    CAMPAIGN_START = "campaign_start"
    CAMPAIGN_END = "campaign_end"
    OFFER_CHOSEN = "offer_chosen"
    CREATE = "create"  # intent / outcome
    STATUS = "status"  # the market's status for an instance changed
    PREFLIGHT_PASSED = "preflight_passed"
    PREFLIGHT_FAILED = "preflight_failed"
    QUARANTINE = "quarantine"
    THROTTLE = "throttle"
    HOST_KEY_CHANGED = "host_key_changed"
    ABANDON = "abandon"
    STOP = "stop"  # intent / outcome, or a fact found by reconcile
    START = "start"
    DESTROY = "destroy"
    SENT = "sent"  # one try of a change as it left
    LOST = "lost"  # the market says it no longer exists, without our destroy
    RETURNED = "returned"  # a written-off (lost) instance listed again: the write-off is void
    UNSEEN = "unseen"  # left out of a list answer: asked for directly, still held
    BAD_ROW = "bad_row"  # a market row that failed validation: skipped this poll, counted
    # a held instance's row unreadable from `ts` (its last good read; `detail.seen_at`: the
    # poll that found it so) to its `read_again`: billed its worst case (core.billing, `unread`)
    UNREAD = "unread"
    READ_AGAIN = "read_again"
    JOB_STARTED = "job_started"
    JOB_FINISHED = "job_finished"
    ARTIFACTS = "artifacts"
    UPLOADED = "uploaded"  # the campaign's `upload` pushed to a host's job folder, checksummed
    TRAP = "trap"
    ADOPTED = "adopted"
    DETACHED = "detached"
    NOTE = "note"
    CAMPAIGN_FAULT = "campaign_fault"  # a failure blamed on the campaign (image, job): creates stop
    XID = "xid"  # a fatal XID / ECC event on a proven host: stopped and its machine marked
    SSH_ROUTE = "ssh_route"  # the SSH route (direct / proxy, host:port) an instance was reached by
    FLEET_SIZE = "fleet_size"  # the wanted fleet changed (a person, or their stop of one)
    HAND_OVER = "hand_over"  # a person handed an instance rentwatch did not create to automation
    ERROR = "error"  # the engine refused something of its own (an illegal lifecycle move)
    # the interruptible tier (core/bidding/tier.py): each with the bid, bid_floor and the reason
    OUTBID = "outbid"  # a bid rental stopped by the market for a higher bid or on-demand
    RESUMED = "resumed"  # an outbid rental running again by itself (it bills again from then)
    REBID = "rebid"  # the bid of a rental changed (PUT instances/bid_price)
    MOVED = "moved"  # an outbid rental's job moved to another host from its last checkpoint
    # a moved job's newer state copied off its paused rental onto its next host
    # (PUT commands/copy_direct): asked (`phase` intent), landed or given up (outcome)
    RESCUED = "rescued"
    # a rental that is not what its create asked for (its type or price, read off the market's
    # row right after the create: core/bidding/rental_check.py), and the fix it got
    RENTAL_MISMATCH = "rental_mismatch"
    # a host's price increase pending on a rental (vast-cli PR #401), and our answer to it
    # (`phase` intent, then outcome): the old and new prices, the rule's weighing, its reason
    PRICE_INCREASE = "price_increase"
    # a new GPU price in force from `ts` (`detail.price`): an accepted increase, at its
    # contract's end date; a billing mark as a rebid is (core/billing.EVENT_MARKS)
    PRICE = "price"


EVENT_KINDS = frozenset(k.value for k in EventKind)
