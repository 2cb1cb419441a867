"""The GPU table as the work model reads it: a speed and a price range for every model, the
L40S at its datasheet's dense rate."""

from rentwatch.core.preflight.gpu_specs import (
    DPH_RANGE,
    GPU_SPECS,
    OTHER_SPECS,
    expected_tflops,
    spec_for,
)


def test_every_listed_model_has_a_price_range():
    assert len(DPH_RANGE) >= 15
    for name in GPU_SPECS:
        lo, hi = DPH_RANGE[name]
        assert 0 < lo < hi
    assert all(spec_for(n) is not None for n in DPH_RANGE)


def test_l40s_is_measured_against_its_dense_datasheet_rate():
    # 362 TFLOP/s dense bf16: the old 180 was half of it
    l40s = expected_tflops("L40S")
    assert l40s is not None and 0.6 * 362 <= l40s <= 362
    assert l40s > (expected_tflops("L40") or 0)


def test_cheap_cards_cost_more_per_tflop():
    # what the real market does, and what the simulator's families spread
    def per_tflop(name: str) -> float:
        lo, hi = DPH_RANGE[name]
        return (lo + hi) / 2 / (expected_tflops(name) or 1)

    assert per_tflop("RTX 3060") > 1.5 * per_tflop("RTX 4090")
    assert set(OTHER_SPECS) & set(DPH_RANGE)
