"""Read one series of mcad's metrics registry, as a test checks what was reported."""

from __future__ import annotations

from mcad.metrics import REGISTRY


def sample(name: str, **labels: str) -> float | None:
    """The value of series ``name{labels}``; None when it does not exist."""
    return REGISTRY.get_sample_value(name, labels)
