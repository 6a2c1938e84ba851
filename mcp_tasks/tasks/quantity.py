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
_SUFFIXES: Final = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


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
