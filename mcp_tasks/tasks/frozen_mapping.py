"""An immutable, hashable mapping of names to JSON values, for settings given as a JSON object. Pure.

Settings are frozen dataclasses, hashed and compared; a setting whose value is a JSON object (the tenants'
limits, Kueue's queue names) needs a mapping that is both and that prints as the JSON it came from, so the
configuration table and `mcp-tasks config` show what the operator wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TypeVar

V = TypeVar("V")


class FrozenJsonMapping(Mapping[str, V]):
    """A name → value mapping, immutable and hashable; `str()` is its JSON (sorted keys, compact), or `""`
    when empty. Two are equal when they are of the same class and hold the same items.

    Values are kept as given (a subclass whose values are mappings copies them in its `__init__`).
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, V] | None = None) -> None:
        self._items: dict[str, V] = dict(items or {})

    def __getitem__(self, key: str) -> V:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(str(self))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FrozenJsonMapping) and type(other) is type(self) and self._items == other._items

    def __str__(self) -> str:
        return json.dumps(self._items, sort_keys=True, separators=(",", ":")) if self._items else ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._items!r})"
