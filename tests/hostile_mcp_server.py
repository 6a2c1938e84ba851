"""A deliberately hostile stdio MCP server (2025-06-18), for the bridge's robustness tests. Standard library only.

Run as `python hostile_mcp_server.py <journal>`: every line it reads is appended to `<journal>` (so a test
sees what the bridge sent, e.g. `notifications/cancelled`). It also lists a tool (that only echoes its
arguments) for each name in `<journal>.tools`, when that file exists. Tools:
- `flood`: before answering, writes a malformed line, a line that is JSON but no JSON-RPC message, a request
  of a method no client has, `count` progress notifications and `count` log messages, then a result of
  `size` bytes of text;
- `hang`: logs `hanging` (`notifications/message`, level warning, logger `h`), then never answers;
- `die`: exits at once, mid-call;
- `refuse`: answers with a JSON-RPC error (-32050, "refused by the server", data `{"why": "test"}`);
- `slow`: reports progress 0 of 1 at once and answers after `seconds` from a timer thread, so calls overlap
  on one connection (the journal then gets `{"answered": <request id>}`).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

TOOLS = [
    {"name": name, "description": f"hostile {name}", "inputSchema": {"type": "object"}, **extra}
    for name, extra in (
        ("flood", {}),
        ("hang", {}),
        ("die", {"annotations": {"idempotentHint": False}}),
        ("refuse", {}),
        ("slow", {}),
    )
]


_LOCK = threading.Lock()


def send(message: dict[str, Any]) -> None:
    with _LOCK:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def main() -> None:
    journal = open(sys.argv[1], "a", encoding="utf-8")  # noqa: SIM115 - open for the process's life
    for line in sys.stdin:
        with _LOCK:
            journal.write(line)
            journal.flush()
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "result": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {"tools": {}, "logging": {}},
                        "serverInfo": {"name": "hostile", "version": "0"},
                    },
                }
            )
        elif method == "tools/list":
            extra = Path(sys.argv[1] + ".tools")
            more = extra.read_text().split() if extra.exists() else []
            listed = TOOLS + [{"name": name, "inputSchema": {"type": "object"}} for name in more]
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": listed}})
        elif method == "tools/call":
            name = message["params"]["name"]
            arguments = message["params"].get("arguments") or {}
            token = (message["params"].get("_meta") or {}).get("progressToken")
            if name == "die":
                sys.exit(3)
            if name == "hang":
                send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/message",
                        "params": {"level": "warning", "logger": "h", "data": "hanging"},
                    }
                )
                continue
            if name == "slow":
                if token is not None:
                    send(
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/progress",
                            "params": {"progressToken": token, "progress": 0, "total": 1},
                        }
                    )

                def answer(ident: Any = ident) -> None:
                    send(
                        {
                            "jsonrpc": "2.0",
                            "id": ident,
                            "result": {"content": [{"type": "text", "text": f"slow {ident}"}]},
                        }
                    )
                    with _LOCK:
                        journal.write(json.dumps({"answered": ident}) + "\n")
                        journal.flush()

                threading.Timer(float(arguments.get("seconds", 1)), answer).start()
                continue
            if name == "refuse":
                error = {"code": -32050, "message": "refused by the server", "data": {"why": "test"}}
                send({"jsonrpc": "2.0", "id": ident, "error": error})
                sys.stdout.flush()
                continue
            count, size = int(arguments.get("count", 1000)), int(arguments.get("size", 10))
            sys.stdout.write("{this is not json\n")
            send({"jsonrpc": "2.0", "method": "notifications/unknown/thing", "params": {"x": 1}})
            send({"jsonrpc": "2.0", "id": "weird-1", "method": "no/such/method", "params": {}})
            for step in range(1, count + 1):
                if token is not None:
                    send(
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/progress",
                            "params": {"progressToken": token, "progress": step, "total": count},
                        }
                    )
                send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/message",
                        "params": {"level": "info", "data": f"flood {step}"},
                    }
                )
            text = "x" * size
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": text}]}})
        elif ident is not None and method is not None:
            send({"jsonrpc": "2.0", "id": ident, "result": {}})
        sys.stdout.flush()


if __name__ == "__main__":
    main()
