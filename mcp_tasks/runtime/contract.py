"""The tool runtime contract: environment variables and worker-API paths a tool process uses.

Shared by the tool side (`mcp_tasks.runtime`) and the executors that serve it (embedded runner;
the Kubernetes operator). Documented for other languages in `docs/tool-runtime.md`.
Standard library only.
"""

from __future__ import annotations

import re
from typing import Final

ENV_WORKER_URL: Final = "MCPTASKS_WORKER_URL"
"""Base URL of this execution on the worker API, e.g. `http://127.0.0.1:41234/v1/executions/<id>`."""
ENV_WORKER_TOKEN: Final = "MCPTASKS_WORKER_TOKEN"
"""Bearer token that authorizes this process, and only it, on its own execution (embedded runner)."""
ENV_WORKER_TOKEN_FILE: Final = "MCPTASKS_WORKER_TOKEN_FILE"
"""Instead of `MCPTASKS_WORKER_TOKEN`: a file holding the bearer token, read again for every call, as
it is rotated (on Kubernetes: the pod's projected ServiceAccount token, audience `mcp-tasks-worker`)."""
ENV_WORKER_CA_FILE: Final = "MCPTASKS_WORKER_CA_FILE"
"""PEM file of the CA to verify an `https` worker URL's certificate with (on Kubernetes: the `ca.crt` of the
operator's worker-API certificate, mounted beside the worker token); unset: the system's CA bundle."""
ENV_TASK_ID: Final = "MCPTASKS_TASK_ID"
"""The MCP `taskId` when the run is a task; empty for a synchronous (non-task) run."""

PATH_INPUT: Final = "/input"
"""GET → `{"arguments": {...}, "inputResponses": {...}, "taskId": str|null, "attempt": int}`."""
PATH_STATUS: Final = "/status"
"""POST `{"statusMessage": str}` → 204. Shown to clients as the task's `statusMessage`."""
PATH_PROGRESS: Final = "/progress"
"""POST `{"progress": number, "total"?: number, "message"?: str}` → 204. A task shows it as its
`statusMessage`; a synchronous call whose client sent a `progressToken` gets `notifications/progress`."""
PATH_INPUT_REQUESTS: Final = "/input-requests"
"""POST `{"inputRequests": {suggestedKey: {method, params}}, "roundId"?: str}` → `{"keys": {suggestedKey: mintedKey}}`.

`roundId` (`ROUND_ID_PATTERN`), new for each round and repeated when the same POST is sent again, makes
the round idempotent: a retry after a lost answer (the executor restarted, the connection broke) gets
the keys the first POST minted, not new ones that the client would be asked again for.

Methods: `elicitation/create` (form or URL mode), `sampling/createMessage`, `roots/list`. A synchronous
run that asks is continued as a hidden task its caller answers in multi-round-trip retries. 409 when
the caller cannot take input rounds (a legacy-era synchronous call). 412 `{"message", "capability"}`
when the client did not declare the capability a request needs (`elicitation`, `elicitation.url`,
`elicitation.form`, `sampling`, `roots`); nothing is issued then."""
PATH_INPUT_RESPONSES: Final = "/input-responses"
"""GET `?keys=a,b&waitMs=N` → `{"inputResponses": {key: response}}`: the answers to those keys, possibly
partial, after waiting up to `waitMs` (capped by the server) for at least one. Asked again for a key it
already handed out (the first answer was lost), it hands that answer out again: with a new answer, or
at once when none of the keys asked for is still unanswered (else it waits for one)."""
PATH_RESULT: Final = "/result"
"""POST `{"result": CallToolResult}` or `{"error": {code, message, data?}, "statusMessage": str}` → 204.

409 when the execution already finished or was cancelled."""

ROUND_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a `roundId` may be (match it whole): 1 to 64 letters, digits, `-` or `_`."""

MAX_WAIT_MS: Final = 25_000
"""Longest single `input-responses` wait the server honours, in ms; the helper simply asks again."""

# ---------------------------------------------------------------- warm workers (`spec.warm`)

ENV_SERVE_PORT: Final = "MCPTASKS_SERVE_PORT"
"""Set for a warm worker: serve calls on this TCP port (`runtime.serve`) instead of running one call."""
ENV_SERVE_HOST: Final = "MCPTASKS_SERVE_HOST"
"""Address a warm worker listens on; default `0.0.0.0` (all interfaces of its pod). Embedded: `127.0.0.1`."""
ENV_SERVE_CONCURRENCY: Final = "MCPTASKS_SERVE_CONCURRENCY"
"""Calls one warm worker runs at once (`spec.warm.concurrency`); more are refused with 429. Default 1."""
ENV_SERVE_TOOL: Final = "MCPTASKS_SERVE_TOOL"
"""The tool a warm worker serves: a call naming another tool (a stale address reused by another
tool's pod) is refused with 409, before anything runs."""
ENV_SERVE_CALL_KEY: Final = "MCPTASKS_SERVE_CALL_KEY"
"""The public key(s) a warm worker checks its callers' credentials with: Ed25519 public keys in PEM
(`-----BEGIN PUBLIC KEY-----`), one or more (a key rotation), concatenated. Public, not a secret: the
executor that starts the worker puts it there (the embedded runner in the environment it spawns the
worker with; on Kubernetes the operator in the warm Deployment's pod template). A worker without it
refuses to start."""
ENV_SERVE_CALL_KEY_FILE: Final = "MCPTASKS_SERVE_CALL_KEY_FILE"
"""Instead of `MCPTASKS_SERVE_CALL_KEY`: a file holding the same PEM text, read once at start."""
ENV_SERVE_TLS_CERT_FILE: Final = "MCPTASKS_SERVE_TLS_CERT_FILE"
"""With `ENV_SERVE_TLS_KEY_FILE`: a warm worker serves its calls over HTTPS with this PEM certificate chain
(on Kubernetes the chart's `tls.warmWorkers` Secret, mounted by the operator); unset: plain HTTP."""
ENV_SERVE_TLS_KEY_FILE: Final = "MCPTASKS_SERVE_TLS_KEY_FILE"
"""The PEM private key of `ENV_SERVE_TLS_CERT_FILE`."""
ENV_SERVE_PARENT_PID: Final = "MCPTASKS_SERVE_PARENT_PID"
"""Embedded only: the runner's pid. The worker exits when its parent is gone, so a crashed server
leaves no warm worker behind."""

CALL_AUDIENCE_PREFIX: Final = "mcp-tasks-warm-worker:"
"""A session offer's `aud` is this prefix and the tool's name: only that tool's workers take it."""
CALL_OPERATIONS: Final = frozenset({"call", "reattach", "cancel"})
"""The `op` of a call credential: `POST /v1/calls`, `GET /v1/calls/{id}`, `DELETE /v1/calls/{id}`."""
SESSION_OPERATION: Final = "session"
"""The `op` claim of a session offer (`PATH_SESSIONS`)."""
CALL_MAX_LIFETIME_S: Final = 600
"""Longest a call credential may still be valid when a warm worker checks it (`exp` - now), in seconds
(executors mint them for 120 s)."""
SESSION_MAX_LIFETIME_S: Final = 3600
"""Longest lifetime (`exp` - `iat`) a warm worker accepts in a session offer, in seconds (executors open
sessions for 3600 s and open a new one when less than 600 s is left)."""
CALL_REPLAY_WINDOW: Final = 4096
"""Counters a warm worker tracks per session: a credential whose counter is this many or more below the
highest taken on its session is refused (401; the executor opens a new session and sends again)."""

PATH_SESSIONS: Final = "/v1/sessions"
"""Served by a warm worker: how an executor opens the session its call credentials are keyed with.

`GET` (no credential) → 200 `{"workerKey": <base64url X25519 public key, 32 bytes>}`: made at the worker's
start, never stored. `POST` with `Authorization: Bearer <offer>` and no body → 204 (opened), or 401
`{"message": "unauthorized"}` and the connection closed. The offer is a JWT signed with EdDSA (Ed25519) by
the executor (`ENV_SERVE_CALL_KEY` holds its public key), with claims `aud` (`CALL_AUDIENCE_PREFIX` + the
tool name), `iat`, `exp` (at most `SESSION_MAX_LIFETIME_S` after `iat`; the session ends then), `jti` (the
session id: unique, base64url, no `.`), `op` (`SESSION_OPERATION`), `workerKey` (the `GET`'s: the offer
opens a session on this worker only) and `executorKey` (base64url of a fresh X25519 public key of the
executor). Both sides derive the session key: HKDF-SHA256 (RFC 5869; no salt; 32 bytes) of the X25519
shared secret, with `info` = `mcp-tasks warm session v1`, `aud`, `jti`, `workerKey` and `executorKey`
joined by newlines (LF). An offer whose `jti` the worker knows (or knew: it keeps `exp` order) opens nothing."""

PATH_CALLS: Final = "/v1/calls"
"""Served by a warm worker; every request carries `Authorization: Bearer <credential>` (below), checked
before anything else: a missing, malformed, forged, expired, other-session, other-call or replayed one
is answered 401 `{"message": "unauthorized"}` and the connection closed, whatever the request.

The credential is `<sessionId>.<payload>.<mac>`: `payload` is base64url (no padding) of a JSON object
with `n` (the session's counter: an integer from 1, one per request, each taken once), `exp` (wall-clock
seconds; at most `CALL_MAX_LIFETIME_S` ahead), `op` (`CALL_OPERATIONS`), `sub` (the caller: an opaque
digest of the task's or synchronous call's principal), `executionId` (the call it addresses) and, for
`op` `call`, `bodySha256` (hex SHA-256 of the exact request body); `mac` is base64url of the
HMAC-SHA256, keyed with the session key (`PATH_SESSIONS`), of `mcp-tasks warm call v1` and a newline (LF),
then `<sessionId>.<payload>` as sent. The worker checks the MAC, the operation, the expiry, the call (the
body's `executionId` for a call, the path's otherwise) and that `n` was not taken (a window of
`CALL_REPLAY_WINDOW` counters per session), before it reads the body; a call's body is then checked
against `bodySha256`. A re-attach or cancel is honoured only with the `sub` of the call it addresses
(else 404, as for an unknown call).

POST `{executionId, tool?, arguments, inputResponses, taskId, attempt,
inputBeforeTask?, workerUrl?, workerToken?, maxRunTimeSeconds?, cancelGraceSeconds?}` → 200 with an
NDJSON stream (`application/x-ndjson`) of events, one JSON object per line, the last one final:

- `{"event": "status", "statusMessage"}` and `{"event": "progress", "progress", "total"?, "message"?}`
  while it runs (what `/status` and `/progress` carry for a one-shot run);
- final: `{"event": "result", "result"}` or `{"event": "error", "error", "statusMessage"}` (the `/result`
  bodies), `{"event": "cancelled"}` (stopped by a cancel or its deadline), `{"event": "inputRequired"}`
  (it asked for input but the call named no `workerUrl` to ask through), `{"event": "crashed", "message"}`
  (the tool raised).

Input requests and their answers go to `workerUrl` (`/input-requests`, `/input-responses`, with
`workerToken`), as for a one-shot run. 429 when the worker already runs `concurrency` calls; 409 when
`tool` is not the one it serves; 400 for a malformed body. A caller that closes its connection cancels
the call."""
PATH_HEALTH: Final = "/healthz"
"""Served by a warm worker: GET → 200 `{"status": "ok", "calls": N, "concurrency": C}`, 503 once it drains."""
EVENT_FINAL: Final = frozenset({"result", "error", "cancelled", "inputRequired", "crashed"})
"""The `event` values that end a warm call's stream."""

# ---------------------------------------------------------------- the McpServer bridge (`mcp_tasks.bridge`)

ENV_BRIDGE_SERVER: Final = "MCPTASKS_BRIDGE_SERVER"
"""The bridge's server as JSON: `{server, transport, command, env, workingDir, http}` (written by
`tasks/servers.py:bridge_target`, read by `bridge/target.py`; docs/mcp-servers.md)."""
ENV_BRIDGE_TOOL: Final = "MCPTASKS_BRIDGE_TOOL"
"""The server's own name of the tool the bridge calls (without the McpServer's `toolNamePrefix`)."""
ENV_BRIDGE_IDEMPOTENT: Final = "MCPTASKS_BRIDGE_IDEMPOTENT"
"""`true` when the tool's `execution.idempotent` holds: a call the server lost mid-way is sent again to a
fresh server by the bridge itself; otherwise its outcome is reported unknown."""
ENV_BRIDGE_TASK_SUPPORT: Final = "MCPTASKS_BRIDGE_TASK_SUPPORT"
"""The tool's own 2025-11-25 `execution.taskSupport` as the server listed it (`optional` or `required`; unset
otherwise): the bridge then runs each call as the server's task (`bridge/server_tasks.py`)."""
