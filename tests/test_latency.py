"""One latency lookup rule (``latency.loglog_lookup``): interpolate log-log inside the measured
sizes, extend the nearest segment beyond them and say so; ``trace --predict``/``predict``/report
(``CommTable``) accept an extrapolation, gap never does."""
import math

import pandas as pd
import pytest

from commprof.analysis.boxgap import sweep_price
from commprof.analysis.latency import loglog_lookup

XS = [1024.0, 4096.0, 16384.0]
YS = [10.0, 20.0, 80.0]


def test_inside_the_measured_sizes_it_interpolates_log_log():
    assert loglog_lookup(XS, YS, 4096.0) == (20.0, "exact")
    y, how = loglog_lookup(XS, YS, 2048.0)
    assert how == "interpolated" and y == pytest.approx(math.sqrt(10.0 * 20.0))   # halfway in log: geometric mean


def test_beyond_them_it_extends_the_nearest_segment_and_says_so():
    y, how = loglog_lookup(XS, YS, 65536.0)      # last segment: x4 in size -> x4 in latency
    assert how == "extrapolated" and y == pytest.approx(320.0)
    y, how = loglog_lookup(XS, YS, 256.0)        # first segment: x4 in size -> x2 in latency
    assert how == "extrapolated" and y == pytest.approx(5.0)
    assert loglog_lookup([], [], 1.0) == (None, "none")
    assert loglog_lookup([1024.0], [7.0], 1e6) == (7.0, "single point")
    assert loglog_lookup(XS, [10.0, 0.0, 80.0], 2048.0) == (None, "none")


def test_gap_takes_measured_and_interpolated_values_only():
    rows = [{"op": "all_reduce", "tp": 2, "mode": "eager", "group": 0, "size_bytes": int(x), "timing": "per-call",
             "impl": "nccl", "latency_us_rankavg_mean": y} for x, y in zip(XS, YS)]
    price = sweep_price(pd.DataFrame(rows), 2)
    assert price("all_reduce", 2048) == pytest.approx(loglog_lookup(XS, YS, 2048.0)[0])
    assert price("all_reduce", 16384) == 80.0
    assert price("all_reduce", 65536) is None and price("all_reduce", 256) is None
