"""Wire constants of MCP 2026-07-28 and the `io.modelcontextprotocol/tasks` extension.

Every method name, header name, `_meta` key and version string the project sends or checks is
defined here once. Sources: MCP 2026-07-28 `basic/index.mdx`, `streamable-http.mdx`, and the
Tasks extension (SEP-2663) `specification/draft/tasks.md`. Imported by every layer; does no I/O.
"""

from __future__ import annotations

from typing import Final

PROTOCOL_VERSION: Final = "2026-07-28"
"""The only protocol revision this server speaks (stateless, per-request `_meta`)."""

MODERN_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = (PROTOCOL_VERSION,)
"""Revisions a request may name in `_meta` (the modern, stateless era)."""

LEGACY_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
"""Handshake-era revisions an `initialize` may select (newest first); served statelessly, no session."""

LEGACY_DEFAULT_VERSION: Final = "2025-03-26"
"""What a request without `MCP-Protocol-Version` and without `_meta` is taken to speak (2025-06-18
`transports.mdx` §Protocol Version Header: the server SHOULD assume 2025-03-26)."""

SUPPORTED_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = MODERN_PROTOCOL_VERSIONS + LEGACY_PROTOCOL_VERSIONS
"""Every revision served on the endpoint: `server/discover.supportedVersions` and -32022 `data.supported`."""

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""Extension identifier declared under `clientCapabilities.extensions` (SEP-2663 Negotiation)."""

# Request `_meta` keys (2026-07-28 `RequestMetaObject`).
META_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_PROGRESS_TOKEN: Final = "progressToken"

# Result / notification `_meta` keys.
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
META_RELATED_TASK: Final = "io.modelcontextprotocol/related-task"
"""Legacy (2025-11-25) key; never emitted, stripped from inlined task results."""
META_HANDOFF_TASK_ID: Final = "io.mcptasks/taskId"
"""Our key: the id of the task a handed-off call started (docs/handoff.md), on that call's `CallToolResult`.
Not `related-task`: that key belongs to the 2025-11-25 experimental tasks API, which we do not serve."""

# HTTP headers (SEP-2243). aiohttp header lookups are case-insensitive.
HEADER_PROTOCOL_VERSION: Final = "MCP-Protocol-Version"
HEADER_METHOD: Final = "Mcp-Method"
HEADER_NAME: Final = "Mcp-Name"
HEADER_PARAM_PREFIX: Final = "Mcp-Param-"
HEADER_AUTHORIZATION: Final = "Authorization"
HEADER_SESSION_ID: Final = "Mcp-Session-Id"
"""Legacy era only (2025-11-25 `transports.mdx` §Session Management): issued on `initialize`, echoed by the
client; our value is a signed nonce that scopes the client's JSON-RPC ids (`gateway.legacy_sessions`).
Ignored on 2026-07-28 requests, which have no sessions."""

# Methods we serve.
METHOD_DISCOVER: Final = "server/discover"
METHOD_TOOLS_LIST: Final = "tools/list"
METHOD_TOOLS_CALL: Final = "tools/call"
METHOD_RESOURCES_LIST: Final = "resources/list"
METHOD_RESOURCE_TEMPLATES_LIST: Final = "resources/templates/list"
METHOD_RESOURCES_READ: Final = "resources/read"
METHOD_TASKS_GET: Final = "tasks/get"
METHOD_TASKS_UPDATE: Final = "tasks/update"
METHOD_TASKS_CANCEL: Final = "tasks/cancel"
METHOD_SUBSCRIPTIONS_LISTEN: Final = "subscriptions/listen"

# Legacy-era (2025-11-25) methods, served only to requests without a modern `_meta`.
METHOD_INITIALIZE: Final = "initialize"
METHOD_PING: Final = "ping"
NOTIFICATION_INITIALIZED: Final = "notifications/initialized"
NOTIFICATION_CANCELLED: Final = "notifications/cancelled"
NOTIFICATION_PROGRESS: Final = "notifications/progress"

# Notifications we send.
NOTIFICATION_TASKS: Final = "notifications/tasks"
NOTIFICATION_SUBSCRIPTION_ACK: Final = "notifications/subscriptions/acknowledged"

# Input request methods a task or an MRTR round may carry, and the client capability each needs.
METHOD_ELICIT: Final = "elicitation/create"
METHOD_SAMPLING: Final = "sampling/createMessage"
METHOD_ROOTS_LIST: Final = "roots/list"
INPUT_METHOD_CAPABILITY: Final[dict[str, str]] = {
    METHOD_ELICIT: "elicitation",
    METHOD_SAMPLING: "sampling",
    METHOD_ROOTS_LIST: "roots",
}

TASK_METHODS: Final = frozenset({METHOD_TASKS_GET, METHOD_TASKS_UPDATE, METHOD_TASKS_CANCEL})

NAME_BEARING_PARAMS: Final[dict[str, str]] = {
    METHOD_TOOLS_CALL: "name",
    "prompts/get": "name",
    METHOD_RESOURCES_READ: "uri",
    METHOD_TASKS_GET: "taskId",
    METHOD_TASKS_UPDATE: "taskId",
    METHOD_TASKS_CANCEL: "taskId",
}
"""Method → params key mirrored in the `Mcp-Name` header (SEP-2243; SEP-2663 Routing Headers)."""

RESULT_TYPE_COMPLETE: Final = "complete"
RESULT_TYPE_INPUT_REQUIRED: Final = "input_required"
RESULT_TYPE_TASK: Final = "task"

ARTIFACT_URI_SCHEME: Final = "mcptasks"
"""Scheme of the `resource_link` URIs that name stored artifacts: `mcptasks://artifacts/<taskId>/<name>`."""
