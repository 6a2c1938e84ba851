"""Kubernetes resource quantities (`250m`, `128Mi`, `1.5Gi`, `2`, `1e3`): the syntax and their value.

Used by the McpTool model (`pod_shape`) to check a quantity's syntax where the CRD schema does too, and
to compare a request with its limit (`requests` must not exceed `limits`, as the API server requires of
a pod). Pure; never rounds as the API server's canonical form does, only compares exactly (`Decimal`).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""The quantity grammar of `k8s.io/apimachinery/pkg/api/resource` (the pattern Kubernetes' own CRDs carry)."""
_QUANTITY: Final = re.compile(QUANTITY_PATTERN)
_NUMBER_AND_SUFFIX: Final = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)")
_DECIMAL_EXPONENTS: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_EXPONENTS: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SUFFIXES: Final = {
    **{suffix: Decimal(10) ** exponent for suffix, exponent in _DECIMAL_EXPONENTS.items()},
    **{suffix: Decimal(2) ** exponent for suffix, exponent in _BINARY_EXPONENTS.items()},
}
"""Suffix → multiplier: SI (`m` = 10⁻³, `M` = 10⁶) and binary (`Mi` = 2²⁰)."""


def is_quantity(text: str) -> bool:
    """Whether `text` is a Kubernetes quantity (`QUANTITY_PATTERN`)."""
    return _QUANTITY.fullmatch(text) is not None


def value_of(text: str) -> Decimal:
    """The value of quantity `text` in its base unit (cores for `cpu`, bytes for `memory`): `250m` → 0.25.

    Raises:
        ValueError: `text` is not a quantity.
    """
    if not is_quantity(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. 250m, 128Mi, 1.5Gi, 2)")
    parts = _NUMBER_AND_SUFFIX.fullmatch(text)
    assert parts is not None  # every quantity matches: the pattern above is a special case of this one
    number, suffix = parts.group(1), parts.group(2)
    if suffix in _SUFFIXES:
        return Decimal(number) * _SUFFIXES[suffix]
    return Decimal(number + suffix)  # a decimal exponent, `1e3`
