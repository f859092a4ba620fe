"""The end-to-end benchmark's own arithmetic, on a hand-worked example (so its ratios mean what
they say)."""

from benchmarks.bench_e2e import eager_critical


def test_eager_critical_path_by_hand():
    plan = [
        {"id": 0, "dep": [-1]},
        {"id": 1, "dep": [0]},
        {"id": 2, "dep": [-1]},
        {"id": 3, "dep": [1, 2]},
    ]
    ready = {0: 0.2, 1: 0.4, 2: 0.6, 3: 1.0}  # seconds from plan start when each record was streamed
    took = {0: 0.5, 1: 0.1, 2: 0.3, 3: 0.2}
    # 0: 0.2 → 0.7; 1: max(0.4, 0.7) → 0.8; 2: 0.6 → 0.9; 3: max(1.0, 0.8, 0.9) → 1.2
    assert eager_critical(plan, ready, took) == 1.2
    # the whole plan first (every record ready at 1.0): 1.0 + 0.5 + 0.1 + 0.2 = 1.8
    assert abs(eager_critical(plan, dict.fromkeys(ready, 1.0), took) - 1.8) < 1e-9
    assert eager_critical([], {}, {}) == 0.0
