"""cuda_kernels.mbconv_chain: a block's kernels placed on one clock, its critical path read from their ends."""

import pytest

from cuda_kernels.mbconv_chain import chain_from_events


def _call(t0: float, k1: float, se: tuple[float, float], proj: tuple[float, float]) -> list[dict]:
    """One call's three kernels: kernel 1 from t0 for k1 us; the SE and the projection (start offset, duration)."""
    return [{"name": "void mb::expand_dw_v8_kernel<48, 5>(mb::Params)", "ts": t0, "dur": k1},
            {"name": "mb::se_v3p_kernel(mb::Params, int)", "ts": t0 + se[0], "dur": se[1]},
            {"name": "void mb::project_v9s_kernel<5>(mb::Params)", "ts": t0 + proj[0], "dur": proj[1]}]


def test_the_chain_is_read_from_the_ends():
    # PDL: the SE starts 2 us into kernel 1 (54 us) and ends 3 us after it (its duration, 55 us, is mostly waiting);
    # the projection starts at 50 and ends 22 us after the SE: block 79 us = 54 + 3 + 22
    events = _call(1000.0, 54.0, (2.0, 55.0), (50.0, 29.0))
    events.append({"name": "void at::native::vectorized_elementwise_kernel<4>(...)", "ts": 900.0, "dur": 40.0})
    rows = chain_from_events(events, 3)
    assert [r["after_previous_us"] for r in rows] == [54.0, 3.0, 22.0]
    assert [r["start_us"] for r in rows] == [0.0, 2.0, 50.0]
    assert [r["end_us"] for r in rows] == [54.0, 57.0, 79.0]
    assert [r["duration_us"] for r in rows] == [54.0, 55.0, 29.0]


def test_medians_over_calls_and_unsorted_events():
    calls = [_call(0.0, 50.0, (1.0, 52.0), (40.0, 30.0)),   # block 70: 50 + 3 + 17
             _call(500.0, 60.0, (1.0, 64.0), (40.0, 41.0)),  # block 81: 60 + 5 + 16
             _call(900.0, 55.0, (1.0, 58.0), (40.0, 35.0))]  # block 75: 55 + 4 + 16
    events = [e for c in reversed(calls) for e in c]  # the trace's order is not the launch order
    rows = chain_from_events(events, 3)
    assert [r["after_previous_us"] for r in rows] == [55.0, 4.0, 16.0]
    assert rows[-1]["end_us"] == 75.0


def test_a_trace_that_is_not_whole_calls_is_an_error():
    events = _call(0.0, 50.0, (1.0, 52.0), (40.0, 30.0))[:2]
    with pytest.raises(ValueError, match="not a multiple of 3"):
        chain_from_events(events, 3)
    mixed = _call(0.0, 50.0, (1.0, 52.0), (40.0, 30.0)) + _call(100.0, 50.0, (1.0, 52.0), (40.0, 30.0))
    mixed[4]["name"] = "mb::se_v5_kernel(mb::Params)"
    with pytest.raises(ValueError, match="different kernels"):
        chain_from_events(mixed, 3)


def test_fewer_fused_kernels_than_calls_is_an_error():
    # the tool divides the trace's fused kernels by the calls: 2 kernels over 3 calls gives 0 a call
    with pytest.raises(ValueError, match="not a multiple of 0"):
        chain_from_events(_call(0.0, 50.0, (1.0, 52.0), (40.0, 30.0))[:2], 0)
