"""Hypothesis on a busy machine: the suite shares two cores with other work, so an example that takes longer
than Hypothesis's 200 ms default deadline says nothing about the code. Loaded by conftest for every property
test; a test's own `@settings` still sets its number of examples (and anything else it names)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

PROFILE = "busy-machine"

settings.register_profile(PROFILE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(PROFILE)
