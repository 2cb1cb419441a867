"""[T] The operator who is not watching is told: a campaign fault once (naming the image), the
campaign's end with the receipt's own figures, never the API key; `/metrics` during a campaign
parses with prometheus-client's parser and its spend ends equal to the receipt's."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rentwatch.core.policy import get_policy
from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign
from rentwatch.notify.wording import released
from rentwatch.run.alerts import Alerts
from rentwatch.run.host import run_headless

from .campaigns import campaign_text


class Receiver:
    """A JSON webhook receiver on loopback: what apprise's `json://` URL delivers."""

    def __init__(self) -> None:
        got = self.got = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                got.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"json://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _run(sim, tmp_path, image: str, fleet: int, notify, metrics: str | None = None, extra=""):
    text = campaign_text("alerts", fleet, extra).replace(
        'image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"', f'image = "{image}"'
    )
    campaign = load_campaign(text)
    ledger = tmp_path / "l.duckdb"
    code = asyncio.run(
        run_headless(
            campaign,
            get_policy("default").with_overrides(campaign.policy),
            sim.url,
            sim.api_key,
            str(ledger),
            key_path=str(tmp_path / "key"),
            notify=notify,
            metrics_listen=metrics,
        )
    )
    return code, ledger


def test_an_unpullable_image_notifies_once_naming_the_image(make_sim, tmp_path, receiver):
    sim = make_sim(
        api_key="secret-key-4242",
        seed=5,
        offers=30,
        time_scale=240,
        host_class=[{"behaviour": "healthy", "share": 1.0}],
        image=[{"name": "ghcr.io/acme/private:*", "pullable": False}],
    )
    code, _ = _run(sim, tmp_path, "ghcr.io/acme/private:1.0", 3, [receiver.url])
    assert code != 0
    assert len(receiver.got) == 1, receiver.got
    note = receiver.got[0]
    assert "ghcr.io/acme/private:1.0" in note["title"] + note["message"]
    assert "secret-key-4242" not in json.dumps(receiver.got)


def test_a_campaign_end_tells_the_receipt_and_metrics_match_it(
    make_sim, tmp_path, receiver, monkeypatch
):
    sim = make_sim(
        seed=7, offers=40, time_scale=240, host_class=[{"behaviour": "healthy", "share": 1.0}]
    )
    scraped: list[str] = []
    port_file = tmp_path / "port"
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    port_file.write_text(str(port))

    def scrape() -> None:
        for _ in range(400):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    scraped.append(r.read().decode())
            except OSError:
                pass
            threading.Event().wait(0.1)

    t = threading.Thread(target=scrape, daemon=True)
    t.start()
    told_after_end: list[int] = []
    ended = Alerts.ended

    def spy(self: Alerts, *args: object, **kw: object) -> None:
        q = "SELECT count(*) FROM events WHERE kind = 'campaign_end'"
        told_after_end.append(self.ledger.query(q).rows[0][0])
        ended(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Alerts, "ended", spy)
    code, ledger = _run(
        sim,
        tmp_path,
        "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
        2,
        [receiver.url],
        metrics=f"127.0.0.1:{port}",
        extra='\n[[jobs]]\nname = "j1"\nrun = "echo done"\n',
    )
    assert code == 0
    assert len(receiver.got) == 1, receiver.got  # routine work (creates, a verify) is not news
    ends = [n for n in receiver.got if "spent" in n["title"]]
    assert len(ends) == 1, receiver.got
    with Ledger(ledger, read_only=True) as book:
        receipt = book.receipt("alerts")[0]
        # the figures stop at the campaign's end, and the notice was told after it was written
        # (told before it, a stopped rental's storage moved $0.005 to $0.01 in between)
        ((clock, end_ts),) = book.query(
            "SELECT (SELECT now FROM ledger_clock), "
            "(SELECT max(ts) FROM events WHERE kind = 'campaign_end')"
        ).rows
        assert clock == end_ts
    assert told_after_end == [1]
    assert f"${receipt['total_usd']:.2f} spent" in ends[0]["title"]
    # [AC 7] what the end did, from the same record as its log: the release's own stops and
    # destroys (it stopped the proven hosts; a notice once said "Stopped 0")
    with Ledger(ledger, read_only=True) as book:
        acts = book.events(
            where="actor = 'rule:campaign_end' AND kind IN ('stop', 'destroy') "
            "AND phase = 'outcome' AND ok"
        )
    destroyed = {e.instance_id for e in acts if e.kind == "destroy"}
    stopped = {e.instance_id for e in acts if e.kind == "stop"} - destroyed
    assert stopped, acts
    assert released(len(stopped), len(destroyed)) in ends[0]["message"]
    assert scraped, "never scraped /metrics"
    families = {f.name: f for f in text_string_to_metric_families(scraped[-1])}
    assert "rentwatch_instances" in families and "rentwatch_poll_duration_seconds" in families
    spend = [s.value for s in families["rentwatch_spend_usd"].samples if s.name.endswith("_total")]
    assert spend and spend[0] == pytest.approx(receipt["total_usd"], abs=0.01)
