"""Shared test settings.

Hypothesis checks how long each example and its data generation take (a 200 ms deadline,
the ``too_slow`` health check). Those are timings: on a loaded 2-core machine they fail tests
whose code is right. Tests here never assert a time, so both are off; what an example checks
is unchanged.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("pocketmq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("pocketmq")
