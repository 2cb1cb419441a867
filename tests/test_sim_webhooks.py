"""[AC 1] The simulator's webhooks are Vast's: six fields and no instance field, the renter
events the simulator has (created, started once, stopped, outbid, resumed, deleted, offline
and back online, error, expiring), each naming its instance only in its words, which
rentwatch's reader finds."""

from __future__ import annotations

from rentwatch.notify.webhooks import named_instances
from rentwatch.sim import bids
from rentwatch.sim.market import SimClock, SimMarket
from rentwatch.sim.scenario import parse_scenario
from rentwatch.sim.webhooks_out import WebhookSender

FIELDS = {"event_id", "user_id", "notif_type", "subject", "message", "timestamp"}


def _market(behaviour: str = "healthy") -> SimMarket:
    sc = parse_scenario(
        {"seed": 4, "offers": 4, "host_class": [{"behaviour": behaviour, "share": 1.0}]}
    )
    return SimMarket(sc, SimClock(1.0, origin=1_764_400_000.0), api_key="k")


class Recorder(WebhookSender):
    def __init__(self, market: SimMarket) -> None:
        super().__init__(market, "http://127.0.0.1:9/hook", "s", wall=lambda: 1_700_000_000.0)
        self.bodies: list[dict] = []

    def _post(self, body_obj: dict) -> None:  # recorded, not delivered
        self.bodies.append(body_obj)

    def kinds(self) -> list[str]:
        return [b["notif_type"] for b in self.bodies]


def _run_until(m: SimMarket, sender: Recorder, seconds: float, step: float = 30.0) -> None:
    end = m.clock.now() + seconds
    while m.clock.now() < end:
        m.clock.advance(step)
        sender.tick()


def test_an_on_demand_rental_from_create_to_delete():
    m = _market()
    sender = Recorder(m)
    sender.tick()  # the baseline: nothing rented yet
    inst = m.create(m.machines[0].offer_id, "img", 10, None, {}, None)
    _run_until(m, sender, 3 * 3600)
    m.stop(inst)
    sender.tick()
    m.start(inst)
    _run_until(m, sender, 3 * 3600)  # a start again is not "started": that is the first boot
    m.destroy(inst)
    sender.tick()
    sender.tick()
    assert sender.kinds() == [
        "instance_created",
        "instance_started",
        "instance_stopped",
        "instance_deleted",
    ]
    for body in sender.bodies:
        assert set(body) == FIELDS
        assert named_instances(body["subject"], body["message"]) == (inst.id,)
    started = sender.bodies[1]
    assert started["subject"] == f"Your Vast.ai Instance #{inst.id} Is Now Running"


def test_outbid_and_resume_name_the_instance_in_vasts_words():
    m = _market()
    sender = Recorder(m)
    sender.tick()
    machine = m.machines[0]
    inst = m.create(machine.offer_id, "img", 10, None, {}, None, price=5.0)
    _run_until(m, sender, 3 * 3600)
    bids.pause(inst, m.clock.now())  # a rival's bid took the machine
    sender.tick()
    inst.paused_at = None
    inst.resumes.append(m.clock.now())
    m.start(inst, at=m.clock.now(), resumed=True)
    sender.tick()
    assert sender.kinds()[-2:] == ["outbid", "instance_resumed"]
    outbid = sender.bodies[-2]
    assert outbid["subject"] == f"Your Interruptible Instance #{inst.id} Has Been Outbid"
    assert f"instance {inst.id} on machine {machine.id} has been outbid" in outbid["message"]
    assert "Your bid was $5.00/hr" in outbid["message"]


def test_offline_back_online_error_and_expiring():
    m = _market("offline_midrun")
    sender = Recorder(m)
    sender.tick()
    inst = m.create(m.machines[0].offer_id, "img", 10, None, {}, None)
    _run_until(m, sender, 12 * 3600, step=60)
    assert sender.kinds()[:3] == ["instance_created", "instance_started", "instance_offline"]

    m = _market("fatal_pull")
    sender = Recorder(m)
    sender.tick()
    inst = m.create(m.machines[0].offer_id, "img", 10, None, {}, None)
    inst.machine.contract_end = m.clock.now() + 30 * 3600
    _run_until(m, sender, 8 * 3600, step=60)
    assert "error_msgs" in sender.kinds() and "near_end_date" in sender.kinds()
    assert sender.kinds().count("error_msgs") == 1
    assert sender.kinds().index("error_msgs") < sender.kinds().index("near_end_date")


def test_what_was_rented_before_the_sender_started_is_not_news():
    m = _market()
    inst = m.create(m.machines[0].offer_id, "img", 10, None, {}, None)
    m.clock.advance(3 * 3600)
    sender = Recorder(m)
    sender.tick()
    _run_until(m, sender, 600)
    assert sender.kinds() == []
    m.stop(inst)
    sender.tick()
    assert sender.kinds() == ["instance_stopped"]
