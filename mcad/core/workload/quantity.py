"""Kubernetes resource quantities, parsed exactly.

Why not floats: quota and capacity checks compare sums of many requests; a float
that rounds ``0.1 + 0.2`` the wrong way would admit a gang one millicore too big.
Kubernetes itself keeps quantities as scaled integers with nano precision, and so
do we: a quantity is an ``int`` count of nano-units (10^-9), which makes addition,
subtraction and comparison exact and fast. Values finer than a nano-unit round up,
as Kubernetes rounds them.

Accepted forms (the Kubernetes grammar): ``"2"``, ``"1.5"``, ``"500m"``, ``"100n"``,
``"2Gi"``, ``"1k"``, ``"1e3"``, ``"1.5E-2"``, ``"+3"``, and ints or floats from YAML.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import lru_cache

NANO = 10**9
"""Nano-units per unit: the scale of every quantity in the core."""

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 10**3),
            "": Fraction(1), "k": Fraction(10**3), "M": Fraction(10**6),
            "G": Fraction(10**9), "T": Fraction(10**12), "P": Fraction(10**15),
            "E": Fraction(10**18)}
_PATTERN = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity; the message says why."""


def parse_quantity(value: str | int | float) -> int:
    """Return ``value`` in nano-units, rounding up below one nano-unit.

    >>> parse_quantity("500m")
    500000000
    >>> parse_quantity("2Gi") == 2 * 2**30 * NANO
    True
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is a boolean, not a quantity")
    if isinstance(value, int):
        return value * NANO
    if isinstance(value, float):
        try:
            exact = Fraction(Decimal(repr(value)))
        except (InvalidOperation, ValueError) as err:
            raise QuantityError(f"{value!r} is not a finite number") from err
        return _to_nano(exact)
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is a {type(value).__name__}, not a quantity")
    return _parse_text(value)


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> int:
    """A quantity string in nano-units, remembered: every pod event of a drain parses
    its containers' requests again, and a cluster's requests are a few hundred strings
    (``"1"``, ``"500m"``, ``"4Gi"``), while ``Fraction`` arithmetic on each took 2% of
    the controller's samples in a drain. Errors are not remembered (they raise)."""
    text = value.strip()
    match = _PATTERN.match(text)
    if match is None:
        raise QuantityError(
            f"{value!r} is not a quantity (expected a number with an optional suffix "
            "such as 500m, 2, 1.5, 4Gi, 1e3)"
        )
    number = Fraction(Decimal(match["number"]))
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{value!r} has an exponent out of range")
        number *= Fraction(10) ** exponent
    else:
        suffix = match["suffix"] or ""
        number *= _BINARY.get(suffix, 0) or _DECIMAL[suffix]
    if match["sign"] == "-":
        number = -number
    return _to_nano(number)


def _to_nano(number: Fraction) -> int:
    scaled = number * NANO
    return -(-scaled.numerator // scaled.denominator)  # ceiling, exact


def format_quantity(nano: int, *, resource: str = "") -> str:
    """Render nano-units the way a person reads them: ``8``, ``500m``, ``4Gi``.

    Memory-like resources (``memory``, ``ephemeral-storage``, ``*storage*``) use binary
    suffixes when exact; everything else uses the plainest decimal form.
    """
    if nano % NANO == 0:
        units = nano // NANO
        if ("memory" in resource or "storage" in resource) and units:
            for suffix, factor in reversed(_BINARY.items()):
                if units % factor == 0:
                    return f"{units // factor}{suffix}"
        return str(units)
    if nano % 10**6 == 0:
        return f"{nano // 10**6}m"
    if nano % 10**3 == 0:
        return f"{nano // 10**3}u"
    return f"{nano}n"
