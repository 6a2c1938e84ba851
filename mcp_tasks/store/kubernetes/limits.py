"""What the API server and etcd can keep of one McpTask: integers within 64 bits, and a bounded size.

`KubernetesTaskStore` checks every object it is about to POST or PUT here, so a value the API server would
change (an integer beyond int64 becomes a float) or etcd would refuse (its request limit is 1.5 MiB) is
refused before the request, with an error that names what to send instead.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, Literal

from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.tasks.errors import ResultTooLarge, UnstorableValue

DEFAULT_MAX_OBJECT_BYTES: Final = 512 * 1024
"""Upper bound of one serialized McpTask, in bytes: well under etcd's 1.5 MiB request limit, leaving room
for `managedFields`. A backstop behind the inline-result cap; larger results are artifacts."""

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
_LONG_DIGITS: Final = re.compile(r"\d{19}")
"""19 digits in a row: the shortest text in which an integer outside the int64 range can hide."""


def check_object(body: JsonObject, task_id: str, part: Literal["spec", "status"], max_bytes: int) -> None:
    """Refuse what the API server would change (integers beyond 64 bits) or etcd would reject (size).

    `part` names the write: `spec` (client intent) or `status` (the executor's report, with the result);
    `max_bytes` is the largest serialized object accepted, in bytes.

    Raises:
        UnstorableValue: a 64-bit overflow anywhere, or client intent (`part="spec"`) that is too large.
        ResultTooLarge: the executor's status (the result) is too large.
    """
    encoded = json.dumps(body, separators=(",", ":"))
    # An integer beyond 64 bits has at least 19 digits; without such a run in the text none can be there,
    # and the walk (the costlier half of this check on the create path) is skipped.
    where = _inexact(body) if _LONG_DIGITS.search(encoded) else None
    if where is not None:
        where = where.removeprefix("/spec/").removeprefix("/status/")  # name the field as the client knows it
        raise UnstorableValue(
            f"{where} is an integer outside the signed 64-bit range, which the Kubernetes store cannot keep "
            "exactly; use a smaller number or a string"
        )
    size = len(encoded.encode())
    if size <= max_bytes:
        return
    if part == "spec":
        raise UnstorableValue(
            f"the task's arguments and answers take {size} bytes; the Kubernetes store keeps at most "
            f"{max_bytes} bytes per task: send less data, or a reference to it"
        )
    raise ResultTooLarge(
        f"task {task_id}: McpTask would be {size} bytes (limit {max_bytes}); large results must be stored as artifacts"
    )


def _inexact(value: Any, path: str = "") -> str | None:
    """The JSON path of the first integer the API server would turn into a float, or `None`.

    The API server decodes JSON numbers as int64 or float64: every other value (nulls, strings,
    nesting, arrays, int64 integers) round-trips exactly through preserve-unknown-fields subtrees.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if INT64_MIN <= value <= INT64_MAX else path or "/"
    if isinstance(value, dict):
        for key, item in value.items():
            found = _inexact(item, f"{path}/{key}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _inexact(item, f"{path}/{index}")
            if found is not None:
                return found
    return None


__all__ = ["DEFAULT_MAX_OBJECT_BYTES", "INT64_MAX", "INT64_MIN", "check_object"]
