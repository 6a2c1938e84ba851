"""Every Kubernetes API call in `mcp_tasks` goes through the API edge (`store/kubernetes/client.py`).

Our own rule (REVIEW.md, shape 3; CONVENTIONS.md: every network call has a deadline, stores map backend
errors at their edge): outside the edge no module calls a method of a generated kubernetes_asyncio API
class, imports one of those classes, or catches `ApiException`; it passes the method to `client.call`,
`client.call_json` or `client.watch`.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import kubernetes_asyncio.client

import mcp_tasks

PACKAGE = Path(mcp_tasks.__file__).parent
EDGE = PACKAGE / "store" / "kubernetes" / "client.py"


def _api_classes() -> dict[str, type]:
    return {
        name: value
        for name, value in vars(kubernetes_asyncio.client).items()
        if inspect.isclass(value) and name.endswith("Api") and name != "ApiClient"
    }


def _api_methods() -> set[str]:
    names: set[str] = set()
    for cls in _api_classes().values():
        names.update(name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_"))
    return names


def test_no_module_calls_the_kubernetes_api_except_through_the_edge() -> None:
    methods, classes = _api_methods(), set(_api_classes())
    assert {"read_namespaced_pod", "create_token_review", "get_namespaced_custom_object"} <= methods
    bypasses: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == EDGE:
            continue
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods:
                bypasses.append(f"{where}:{node.lineno}: calls {node.func.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kubernetes_asyncio.client"):
                for alias in node.names:
                    if alias.name in classes or alias.name == "ApiException":
                        bypasses.append(f"{where}:{node.lineno}: imports {alias.name}")
    assert not bypasses, "Kubernetes API calls outside the API edge:\n" + "\n".join(bypasses)
