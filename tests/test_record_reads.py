"""Our record of machines and models is kept between two events the ledger writes: asked again
with nothing written, it costs no query (the swap watch and the ranking ask it every market
minute); after any event it is read afresh; a ledger another process writes is read each time."""

from __future__ import annotations

import pytest
from rentwatch.ledger import Ledger

REF = "RTX 4090"


def _dud(led: Ledger, iid: int, life_s: float) -> None:
    s = led.intent(
        "create", at=0, actor="rule:t", reason="r", campaign="c", gpu_name=REF, machine_id=iid
    )
    led.outcome(s, at=0, ok=True, instance_id=iid)
    led.record("abandon", at=life_s, actor="rule:t", reason="x", instance_id=iid, detail={})
    s = led.intent("destroy", at=life_s, actor="rule:t", reason="x", instance_id=iid)
    led.outcome(s, at=life_s, ok=True)


def _counting(led: Ledger) -> list[str]:
    asked: list[str] = []
    rows = led._rows

    def counted(sql, params=()):  # type: ignore[no-untyped-def]
        asked.append(sql)
        return rows(sql, params)

    led._rows = counted  # type: ignore[method-assign]
    return asked


@pytest.mark.parametrize("read", ["machine_record", "model_record", "machine_speeds"])
def test_a_record_read_twice_with_nothing_written_is_one_query(read):
    led = Ledger(":memory:")
    _dud(led, 1, 600)
    asked = _counting(led)
    first = getattr(led, read)()
    second = getattr(led, read)()
    assert second == first and len(asked) == 1
    led.close()


def test_an_event_written_since_is_in_the_next_read(tmp_path):
    led = Ledger(tmp_path / "l.duckdb")
    _dud(led, 1, 600)
    assert led.model_record()[REF] == (0, 1, pytest.approx(10.0))
    assert led.machine_record()[1][1] == 1
    _dud(led, 2, 1200)
    assert led.model_record()[REF] == (0, 2, pytest.approx(30.0))
    assert led.machine_record()[2][1] == 1
    led.close()


def test_a_callers_change_to_a_record_never_reaches_the_next_caller():
    led = Ledger(":memory:")
    _dud(led, 1, 600)
    led.machine_record().clear()
    assert 1 in led.machine_record()
    led.close()


def test_a_ledger_another_process_writes_is_read_at_every_ask(tmp_path):
    path = tmp_path / "l.duckdb"
    led = Ledger(path)
    _dud(led, 1, 600)
    led.close()
    ro = Ledger(path, read_only=True)
    asked = _counting(ro)
    ro.model_record()
    ro.model_record()
    assert len(asked) == 2
    ro.close()
