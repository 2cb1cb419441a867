"""A hostile marketplace: an HTTP proxy in front of the real simulator that lies or glitches on
demand, one class of trouble per knob (issue 14's list).

- `drop_ids` / `drop_rate`: rows missing from list answers (the instance still exists and bills);
  with `deny_dropped`, asked for directly meanwhile, the market says it no longer exists
- `repeat_rows`: rows repeated within one list answer
- `create_repeat_id`: a create answer carrying the id of an instance already held (the real new
  rental exists under its own id, unreported: exactly what a lying market would leave behind)
- `bad_numbers`: NaN / negative / huge numbers in instance rows (`dph_total`, `dph_base`, ...)
- `negative_offers`: offers whose `dph_base` / `storage_cost` are negative
- `bad_min_bid`: offers and instance rows whose `min_bid` is NaN, negative, huge, tiny, a
  string or null (the bid tier's one number the policy bids from)
- `trickle_s`: list answers sent one byte at a time with this pause between bytes
- `escapes`: terminal escapes (OSC 52, title change, screen clear, bidi) in status lines;
  `escape_gpu_names`: the same in GPU names of instance rows and offers
- `garble_rate`: answer bodies replaced by broken JSON
- `fail_status` after `fail_after_lists` list answers: every later request answered with that
  status (401: the key revoked, 503: the market down), for good
- `refuse_filter`: list requests whose `select_filters` name this field refused (400), as a
  market that does not serve that filter would; `refuse_show`: shows of these ids refused (400)
- `hold_create_s`: create answers held this long after the simulator made the rental (a slow
  market: the rental exists and bills while rentwatch waits for its id), or until
  `release_creates()`; `creates_held` is set once one is being held
- `loop_filter`: list answers to requests filtered on this field point their `next_token` back
  at their first page, for good (a market whose paging loops)

Everything else is passed through unchanged, the `X-Market-Time` stamp included, so the
simulator's truth (`/sim/v0/truth`, read from the sim directly) stays the referee. Only JSON
field names of the real API are touched (VAST_API.md; the official CLI's `vast.py` reads the same
`instances`, `offers`, `new_contract` keys). `injected` counts what was done, per class.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

ESCAPES = ("\x1b]52;c;cm0gLXJmIH4=\x07", "\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "\u202e", "\x9b31m")
_LIST_PATHS = ("/api/v0/instances", "/api/v0/instances/", "/api/v1/instances", "/api/v1/instances/")
_PASS_HEADERS = ("content-type", "x-market-time", "retry-after")
_FIRST_PAGE = "MA=="  # the simulator's token for a filtered list's offset 0 (base64 of "0")


@dataclass
class Hostility:
    """What to inject; every knob off by default. Rates are per answer (or per row)."""

    drop_ids: set[int] = field(default_factory=set)
    drop_rate: float = 0.0
    drop_polls: int = 0  # with drop_ids: withhold them from this many list answers, then stop
    drop_new: int = 0  # the first N ids created go into drop_ids as their create is answered
    deny_dropped: bool = False  # while rows are withheld, asked for directly: "no such instance"
    repeat_rows: float = 0.0
    create_repeat_id: int = 0  # this many create answers rewritten to an id already held
    bad_numbers: dict[int, str] = field(default_factory=dict)  # id -> "nan" | "neg" | "huge"
    bad_number_rate: float = 0.0
    sticky_bad: int = 0  # the first N instances reported carry `sticky_kind` in every answer
    sticky_kind: str = "nan"
    negative_offers: float = 0.0
    bad_min_bid: float = 0.0
    trickle_s: float = 0.0
    trickle_answers: int = 0  # how many list answers to trickle (0: every one)
    escapes: bool = False
    escape_gpu_names: bool = False
    garble_rate: float = 0.0
    fail_status: int = 0  # 0: off; else every request after `fail_after_lists` gets it
    fail_after_lists: int = 0
    refuse_filter: str | None = None
    refuse_show: set[int] = field(default_factory=set)
    loop_filter: str | None = None
    hold_create_s: float = 0.0
    seed: int = 14


class HostileMarket:
    """`HostileMarket(sim.url, Hostility(...)).start()`; `.url` is what rentwatch talks to."""

    def __init__(self, upstream: str, hostility: Hostility | None = None) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.h = hostility or Hostility()
        self.rng = random.Random(self.h.seed)
        self.injected: dict[str, int] = {}
        self.held: list[int] = []  # ids the market has reported, in order
        self.running: list[int] = []  # ids running in the last full list answer
        self.lock = threading.Lock()
        self._drop_left = self.h.drop_polls
        self._trickled = 0
        self._lists = 0  # list answers passed on, for `fail_after_lists`
        self._server: ThreadingHTTPServer | None = None
        self.creates_held = threading.Event()
        self._creates_released = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> HostileMarket:
        market = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                market.handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = _any  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def release_creates(self) -> None:
        """The create answers held (`hold_create_s`) go now, and any later one at once."""
        self._creates_released.set()

    def stop(self) -> None:
        self.release_creates()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.injected[what] = self.injected.get(what, 0) + n

    # -- one request ---------------------------------------------------------------------------
    def handle(self, rq: BaseHTTPRequestHandler) -> None:
        length = int(rq.headers.get("Content-Length") or 0)
        body = rq.rfile.read(length) if length else b""
        if self.failed(rq) or self.refused(rq):
            return
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        headers = {k: v for k, v in rq.headers.items() if k.lower() not in ("host", "connection")}
        try:
            conn.request(rq.command, rq.path, body=body or None, headers=headers)
            up = conn.getresponse()
            status, data = up.status, up.read()
            out_headers = {k: v for k, v in up.getheaders() if k.lower() in _PASS_HEADERS}
        except OSError:
            rq.send_error(502)
            return
        finally:
            conn.close()
        path = urlsplit(rq.path).path
        data, trickle = self.rewrite(rq.command, path, status, data)
        if self.h.loop_filter and self.h.loop_filter in self.filters(rq) and status < 400:
            data = self.loop(data)
        if self.h.hold_create_s and rq.command == "PUT" and path.startswith("/api/v0/asks/"):
            self.count("create_held")
            self.creates_held.set()
            self._creates_released.wait(self.h.hold_create_s)
        rq.send_response(status)
        for k, v in out_headers.items():
            rq.send_header(k, v)
        rq.send_header("Content-Length", str(len(data)))
        rq.end_headers()
        try:
            if trickle:
                for i in range(len(data)):
                    rq.wfile.write(data[i : i + 1])
                    rq.wfile.flush()
                    time.sleep(trickle)
            else:
                rq.wfile.write(data)
        except OSError:
            pass  # the client gave up on a slow answer: that is the point

    def failed(self, rq: BaseHTTPRequestHandler) -> bool:
        """The market gone for good (`fail_status`): answer with it, as the real API words its
        refusals (`{"success": false, "error": ..., "msg": ...}`, VAST_API.md)."""
        h, path = self.h, urlsplit(rq.path).path
        if not h.fail_status or path.startswith("/sim/"):
            return False
        with self.lock:
            if self._lists < h.fail_after_lists:
                if rq.command == "GET" and path in _LIST_PATHS:
                    self._lists += 1
                return False
        self.count(f"fail_{h.fail_status}")
        err = "auth_error" if h.fail_status == 401 else "service_unavailable"
        data = json.dumps({"success": False, "error": err, "msg": "injected"}).encode()
        rq.send_response(h.fail_status)
        rq.send_header("Content-Type", "application/json")
        rq.send_header("Content-Length", str(len(data)))
        rq.end_headers()
        rq.wfile.write(data)
        return True

    @staticmethod
    def filters(rq: BaseHTTPRequestHandler) -> dict[str, Any]:
        """The `select_filters` of a list request ({} for anything else)."""
        parts = urlsplit(rq.path)
        if rq.command != "GET" or parts.path not in _LIST_PATHS:
            return {}
        raw = parse_qs(parts.query).get("select_filters", ["{}"])[0]
        try:
            doc = json.loads(raw)
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}

    def refused(self, rq: BaseHTTPRequestHandler) -> bool:
        """A filter this market does not serve (`refuse_filter`), or a show it refuses
        (`refuse_show`): a 400, worded as the real API words its refusals."""
        h, path = self.h, urlsplit(rq.path).path
        what = None
        if h.refuse_filter and h.refuse_filter in self.filters(rq):
            what = "refused_filter"
        elif rq.command == "GET" and path.startswith("/api/v0/instances/") and h.refuse_show:
            tail = path.removeprefix("/api/v0/instances/").strip("/")
            if tail.isdigit() and int(tail) in h.refuse_show:
                what = "refused_show"
        if what is None:
            return False
        self.count(what)
        data = json.dumps({"success": False, "error": "invalid_args", "msg": what}).encode()
        rq.send_response(400)
        rq.send_header("Content-Type", "application/json")
        rq.send_header("Content-Length", str(len(data)))
        rq.end_headers()
        rq.wfile.write(data)
        return True

    def loop(self, data: bytes) -> bytes:
        """`loop_filter`: the answer's next page is its first page again."""
        try:
            doc = json.loads(data)
        except ValueError:
            return data
        if not isinstance(doc, dict):
            return data
        doc["next_token"] = _FIRST_PAGE
        self.count("looped")
        return json.dumps(doc).encode()

    def rewrite(self, method: str, path: str, status: int, data: bytes) -> tuple[bytes, float]:
        h = self.h
        if status >= 400 or path.startswith("/sim/"):
            return data, 0.0
        try:
            doc = json.loads(data)
        except ValueError:
            return data, 0.0
        trickle = 0.0
        if method == "GET" and path in _LIST_PATHS and isinstance(doc, dict):
            rows = doc.get("instances")
            if isinstance(rows, list):
                doc["instances"] = self.list_rows([r for r in rows if isinstance(r, dict)])
            if h.trickle_s and (not h.trickle_answers or self._trickled < h.trickle_answers):
                self._trickled += 1
                self.count("trickle")
                trickle = h.trickle_s
        elif method == "GET" and path.startswith("/api/v0/instances/") and isinstance(doc, dict):
            row = doc.get("instances")
            if isinstance(row, dict) and self.denied(row):
                doc["instances"] = None  # the market says it no longer exists: a lie
            elif isinstance(row, dict):
                self.row_text(row)
                self.row_numbers(row)
        elif method == "PUT" and path.startswith("/api/v0/asks/") and isinstance(doc, dict):
            self.create_answer(doc)
        elif (
            method in ("POST", "PUT")
            and ("bundles" in path or "search/asks" in path)
            and isinstance(doc, dict)
            and isinstance(doc.get("offers"), list)
        ):
            for offer in doc["offers"]:
                if isinstance(offer, dict):
                    self.offer(offer)
        out = json.dumps(doc).encode()  # NaN stays NaN: Python's json writes it, as a lying
        if h.garble_rate and self.rng.random() < h.garble_rate:  # market's encoder might
            self.count("garbled")
            out = out[: max(1, len(out) // 2)] + b'{"\x00'
        return out, trickle

    # -- the classes -------------------------------------------------------------------------
    def list_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        h = self.h
        with self.lock:
            for r in rows:
                if isinstance(r.get("id"), int) and r["id"] not in self.held:
                    self.held.append(r["id"])
                    if len(self.held) <= h.sticky_bad:
                        h.bad_numbers[r["id"]] = h.sticky_kind
            self.running = [
                r["id"]
                for r in rows
                if isinstance(r.get("id"), int) and r.get("actual_status") == "running"
            ]
        out = []
        dropping = bool(h.drop_ids) and (not h.drop_polls or self._drop_left > 0)
        if dropping and h.drop_polls and any(r.get("id") in h.drop_ids for r in rows):
            self._drop_left -= 1
        for r in rows:
            if dropping and r.get("id") in h.drop_ids:
                self.count("dropped")
                continue
            if h.drop_rate and self.rng.random() < h.drop_rate:
                self.count("dropped")
                continue
            self.row_text(r)
            self.row_numbers(r)
            out.append(r)
            if h.repeat_rows and self.rng.random() < h.repeat_rows:
                self.count("repeated")
                out.append(dict(r))
        return out

    def denied(self, row: dict[str, Any]) -> bool:
        h = self.h
        dropping = bool(h.drop_ids) and (not h.drop_polls or self._drop_left > 0)
        if h.deny_dropped and dropping and row.get("id") in h.drop_ids:
            self.count("denied")
            return True
        return False

    def row_text(self, r: dict[str, Any]) -> None:
        if self.h.escapes and (isinstance(r.get("status_msg"), str) or r.get("status_msg") is None):
            r["status_msg"] = f"{r.get('status_msg') or ''}{self.rng.choice(ESCAPES)}"
            self.count("escapes")
        if self.h.escape_gpu_names and isinstance(r.get("gpu_name"), str):
            r["gpu_name"] = f"{r['gpu_name']}{self.rng.choice(ESCAPES)}"
            self.count("escapes")

    def row_numbers(self, r: dict[str, Any]) -> None:
        h = self.h
        self.min_bid(r)
        kind = h.bad_numbers.get(r.get("id", -1)) if isinstance(r.get("id"), int) else None
        if kind is None and h.bad_number_rate and self.rng.random() < h.bad_number_rate:
            kind = self.rng.choice(["nan", "neg", "huge"])
        if kind is None:
            return
        value = {"nan": float("nan"), "neg": -1.0, "huge": 1e300}[kind]
        for k in ("dph_total", "dph_base", "storage_cost", "start_date"):
            if k in r:
                r[k] = value
        self.count(f"bad_number_{kind}")

    def create_answer(self, doc: dict[str, Any]) -> None:
        with self.lock:
            created = doc.get("new_contract")
            if isinstance(created, int) and self.h.drop_new > 0:
                self.h.drop_new -= 1
                self.h.drop_ids.add(created)  # unseen from the very first list answer on
            if self.h.create_repeat_id <= 0 or not self.held:
                return
            self.h.create_repeat_id -= 1
            # an id already held: a running one (likely verified) when there is one
            doc["new_contract"] = self.running[0] if self.running else self.held[-1]
        self.count("create_repeat_id")

    def min_bid(self, doc: dict[str, Any]) -> None:
        if self.h.bad_min_bid and "min_bid" in doc and self.rng.random() < self.h.bad_min_bid:
            doc["min_bid"] = self.rng.choice(
                [float("nan"), -0.2, 1e12, 1e-9, "0.05", None, float("inf")]
            )
            self.count("bad_min_bid")

    def offer(self, offer: dict[str, Any]) -> None:
        h = self.h
        self.min_bid(offer)
        if h.negative_offers and self.rng.random() < h.negative_offers:
            # dph_total left as it was: the lie hides in the parts (as the issue found it)
            offer["dph_base"] = -abs(float(offer.get("dph_base") or 0.3))
            offer["storage_cost"] = -1.0
            self.count("negative_offer")
        if h.escape_gpu_names and isinstance(offer.get("gpu_name"), str):
            offer["gpu_name"] = f"{offer['gpu_name']}{self.rng.choice(ESCAPES)}"
            self.count("offer_escapes")
