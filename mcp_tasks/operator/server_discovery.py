"""Discovery of McpServers on Kubernetes: the operator runs each server where its calls run and writes status.

Discovery runs in a Job whose pod has the per-call shape (`server_jobs.server_pod`: the unmodified server
image as a native sidecar, the bridge beside it) with the bridge in its `discover` mode: it starts the
server's handshake in the server's own era, lists every page of `tools/list`, and reports the result to
this operator's worker API, at `POST /v1/discoveries/<server>/result`, the way a run reports its result
(`mcp_tasks.runtime`), proving itself with its pod's projected token (audience `mcp-tasks-worker`). The
operator accepts a report only from a pod it made for that server: TokenReview, then the pod (that uid,
labelled `mcptasks.io/mcp-server`), its controller Job (`mcpserver-...`) and that Job's controller, the
McpServer of the same uid. It then writes the McpServer's status in one merge patch: `protocolVersion`,
`serverInfo`, `capabilities`, `instructions`, `tools` (verbatim), `observedGeneration` (the spec the Job
ran), `discoveredAt`, the `Discovered` condition; and clears `lastError`. The catalogs serve the tools
from there (`store/kubernetes/catalog.py`). Why not the API server from the pod (no McpServer rights for
tool accounts), nor the pod's log (a kubelet's, absent on some nodes, and `pods/log` for the operator).

`ServerDiscovery.run` (leader only, beside `warm_tools`) is level-based. After each catalog change and at
least every `RESYNC_S` it:

1. starts a discovery Job for each McpServer whose status does not describe its current generation, or was
   discovered more than `RESYNC_S` ago (a periodic resync: a server's tools can change with its image), unless
   one runs already or the last one for that generation failed less than `RETRY_S` ago;
2. writes a failed Job's reason (its bridge's termination message) as `lastError` and `Discovered` False;
3. writes `Ready`, `toolCount` and `servedTools` from the catalog's verdict (`ServerVerdict`): `Ready`
   True when every tool the server lists (and exposes) is served, else why not (a clash names both tools).

A Job made for an older generation is left to finish (its report is then older than the spec and starts
another). Jobs carry owner references to their McpServer, so deleting it removes them; finished ones
also go after `job_ttl_after_finished_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, cast

from aiohttp import web
from kubernetes_asyncio.client import ApiClient

from mcp_tasks import aio
from mcp_tasks.operator import jobs, labels, observe
from mcp_tasks.operator.credentials import POD_NAME_CLAIM, POD_UID_CLAIM
from mcp_tasks.operator.server_jobs import server_pod
from mcp_tasks.operator.settings import OperatorSettings
from mcp_tasks.operator.tool_status import MERGE_PATCH
from mcp_tasks.protocol.errors import JsonObject
from mcp_tasks.runtime import contract
from mcp_tasks.store.kubernetes import client
from mcp_tasks.store.kubernetes.catalog import BRIDGE_COMMAND, KubernetesToolCatalog, ServerVerdict
from mcp_tasks.store.kubernetes.resources import GROUP, SERVER_PLURAL, VERSION, label_value
from mcp_tasks.tasks.errors import InvalidToolManifest, StoreUnavailable
from mcp_tasks.tasks.interfaces import Clock, utc_now
from mcp_tasks.tasks.record import iso_ms
from mcp_tasks.tasks.servers import MAX_SERVER_TOOLS, Discovery, ServerSpec, parse_server_manifest, tool_specs

logger = logging.getLogger("mcp_tasks.operator")

JOB_PREFIX: Final = "mcpserver-"
GENERATION_ANNOTATION: Final = f"{GROUP}/server-generation"
"""Annotation of a discovery Job: the McpServer's `metadata.generation` it discovers."""
PATH: Final = "/v1/discoveries/{server}"
"""The worker API's discovery path (its `/input` and `/result`, as `mcp_tasks.runtime` calls them)."""
RESYNC_S: Final = 3600.0
"""A successful discovery is redone after this long, in seconds (the server's tools may have changed)."""
RETRY_S: Final = 60.0
"""After a failed discovery, the next one for the same generation starts this long after it ended, in seconds."""
PASS_S: Final = 30.0
"""Longest wait between passes (a failed write, a Job that ended), in seconds."""
MAX_REPORT_BYTES: Final = 8 * 1024 * 1024
"""Largest discovery report accepted, in bytes (an McpServer object holds at most ~1.5 MB in etcd)."""
INSTRUCTIONS_LIMIT: Final = 65536
"""The most of a server's `instructions` kept in status, in characters (the CRD's `maxLength`)."""
VERIFIED_FOR_S: Final = 60.0
MESSAGE_LIMIT: Final = 1000
CONDITION_DISCOVERED: Final = "Discovered"
CONDITION_READY: Final = "Ready"
DISCOVER_TOOL: Final = {"name": "discover", "inputSchema": {"type": "object"}}
"""The listing `tool_specs` is given to shape a discovery pod as one of the server's calls."""


def job_name(server: str, uid: str, generation: int, started: str) -> str:
    """`mcpserver-<server, cut to 30>-<10 hex of uid, generation and start>` (≤ 51 characters)."""
    digest = hashlib.sha256(f"{uid}/{generation}/{started}".encode()).hexdigest()[:10]
    return f"{JOB_PREFIX}{server[:30].rstrip('-.')}-{digest}"


def build_discovery_job(obj: JsonObject, server: ServerSpec, settings: OperatorSettings, started: str) -> JsonObject:
    """The Job that discovers `server` (the McpServer object `obj`): its call pod, the bridge in `discover` mode.

    Raises:
        ValueError: the server declares no image, or the operator has no `bridge_image`.
    """
    meta = obj["metadata"]
    generation = int(meta.get("generation") or 1)
    discovery = Discovery(protocol_version="", server_info={}, tools=(DISCOVER_TOOL,))
    specs, _ = tool_specs(server, discovery, BRIDGE_COMMAND)
    if not specs:
        raise ValueError(f"McpServer {server.name!r} cannot be shaped into a pod")
    (tool,) = specs
    name = job_name(server.name, str(meta["uid"]), generation, started)
    job = jobs.build_job({**obj, "metadata": {**meta, "labels": {}}}, tool, settings)
    pod = job["spec"]["template"]["spec"]
    url = f"{settings.pod_worker_url.rstrip('/')}{PATH.format(server=server.name)}"
    for var in pod["containers"][0]["env"]:
        if var["name"] == contract.ENV_WORKER_URL:
            var["value"] = url
    declared = {var.name for var in tool.manifest.container.env} | {contract.ENV_TASK_ID}
    server_pod(pod, server, settings.bridge_image, settings.tool_defaults, declared, {}, ("discover",))
    job_labels = {**labels.TOOL_RUN_LABELS, labels.MCPSERVER_LABEL: label_value(server.name)}
    if settings.instance:
        job_labels[labels.INSTANCE_LABEL] = settings.instance
    job["metadata"] = {
        "name": name,
        "namespace": meta["namespace"],
        "labels": job_labels,
        "annotations": {GENERATION_ANNOTATION: str(generation)},
        "ownerReferences": [labels.owner_reference(obj)],
    }
    job["spec"]["template"]["metadata"]["labels"] = dict(job_labels)
    job["spec"]["backoffLimit"] = 0
    job["spec"]["activeDeadlineSeconds"] = math.ceil(
        server.manifest.discovery_timeout_seconds + settings.start_deadline_s
    )
    return job


@dataclass(frozen=True, slots=True)
class JobState:
    """A discovery Job as the pass sees it: its generation, whether it ended, how, and when."""

    name: str
    generation: int
    ended: bool
    succeeded: bool
    ended_at: datetime | None
    created_at: str


def job_state(job: JsonObject) -> JobState:
    """Read a discovery Job's state from its `status.conditions` (`Complete`, `Failed`)."""
    meta = job["metadata"]
    generation_text = str((meta.get("annotations") or {}).get(GENERATION_ANNOTATION) or "0")
    ended_at: datetime | None = None
    ended = succeeded = False
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True" or condition.get("type") not in ("Complete", "Failed"):
            continue
        ended, succeeded = True, condition["type"] == "Complete"
        when = condition.get("lastTransitionTime")
        if isinstance(when, str):
            ended_at = datetime.fromisoformat(when.replace("Z", "+00:00"))
    return JobState(
        str(meta["name"]),
        int(generation_text) if generation_text.isdigit() else 0,
        ended,
        succeeded,
        ended_at,
        str(meta.get("creationTimestamp") or ""),
    )


def needs_discovery(obj: JsonObject, newest: JobState | None, now: datetime) -> bool:
    """Whether to start a discovery Job for McpServer `obj` now (the rule in the module docstring)."""
    generation = int(obj["metadata"].get("generation") or 1)
    status = obj.get("status") or {}
    if newest is not None and not newest.ended:
        return False  # one runs; its end (or its report) is the next event
    recent = (
        newest is not None
        and newest.generation == generation
        and newest.ended_at is not None
        and now - newest.ended_at < timedelta(seconds=RETRY_S)
    )
    if recent and newest is not None and (not newest.succeeded or status.get("observedGeneration") != generation):
        return False  # failed (or reported nothing) a moment ago: retry later, not in a loop
    if status.get("observedGeneration") != generation:
        return True
    discovered = status.get("discoveredAt")
    if not isinstance(discovered, str):
        return True
    since = now - datetime.fromisoformat(discovered.replace("Z", "+00:00"))
    return since >= timedelta(seconds=RESYNC_S)


def _condition(kind: str, ok: bool, reason: str, message: str, previous: list[Any], generation: int) -> JsonObject:
    status = "True" if ok else "False"
    old = next((c for c in previous if isinstance(c, dict) and c.get("type") == kind), None)
    since = old.get("lastTransitionTime") if old is not None and old.get("status") == status else None
    text = " ".join(message.split())
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…",
        "lastTransitionTime": since or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "observedGeneration": generation,
    }


def _with(conditions: list[Any], condition: JsonObject) -> list[JsonObject]:
    """`conditions` with `condition` in place of the one of its type (a merge patch replaces the list)."""
    kept = [c for c in conditions if isinstance(c, dict) and c.get("type") != condition["type"]]
    return sorted([*kept, condition], key=lambda c: str(c.get("type")))


def ready_status(verdict: ServerVerdict) -> JsonObject:
    """`Ready`, `toolCount` and `servedTools` for the catalog's verdict on one McpServer."""
    previous = list(verdict.status.get("conditions") or [])
    if verdict.problem is not None:
        ready = _condition(CONDITION_READY, False, "InvalidManifest", verdict.problem, previous, verdict.generation)
    elif not verdict.discovered:
        ready = _condition(
            CONDITION_READY, False, "NotDiscovered", "its tools are not discovered yet", previous, verdict.generation
        )
    elif verdict.refusals:
        ready = _condition(
            CONDITION_READY, False, "ToolsRefused", "; ".join(verdict.refusals), previous, verdict.generation
        )
    else:
        served = f"serves {len(verdict.served)} tool(s): {', '.join(verdict.served)}"
        ready = _condition(CONDITION_READY, True, "Served", served, previous, verdict.generation)
    return {"conditions": _with(previous, ready), "toolCount": len(verdict.served), "servedTools": list(verdict.served)}


def _differs(current: JsonObject, desired: JsonObject) -> bool:
    """Whether `current` status lacks what `desired` says (conditions compared without their times)."""

    def plain(conditions: Any) -> list[Any]:
        return [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in conditions or [] if isinstance(c, dict)
        ]

    for key, value in desired.items():
        if key == "conditions":
            if plain(current.get(key)) != plain(value):
                return True
        elif current.get(key) != value:
            return True
    return False


def discovery_from_report(body: Any) -> JsonObject:
    """The status fields of a bridge's discovery report (`{"result": {"structuredContent": {...}}}`).

    Raises:
        ValueError: the body is not a discovery report, or it lists more than `MAX_SERVER_TOOLS` tools
            (the message says what is wrong).
    """
    result = body.get("result") if isinstance(body, dict) else None
    found = result.get("structuredContent") if isinstance(result, dict) else None
    if not isinstance(found, dict):
        raise ValueError("expected {result: {structuredContent: {protocolVersion, serverInfo, tools}}}")
    tools, info, version = found.get("tools"), found.get("serverInfo"), found.get("protocolVersion")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError("tools must be a list of Tool objects")
    if len(tools) > MAX_SERVER_TOOLS:
        raise ValueError(
            f"the server lists {len(tools)} tools, more than the {MAX_SERVER_TOOLS} one McpServer may serve "
            "(split the server, or expose fewer tools)"
        )
    if not isinstance(info, dict) or not isinstance(version, str) or not version:
        raise ValueError("serverInfo (an object) and protocolVersion (a string) are required")
    status: JsonObject = {
        "protocolVersion": version,
        "serverInfo": info,
        "capabilities": found.get("capabilities") if isinstance(found.get("capabilities"), dict) else {},
        "tools": tools,
    }
    instructions = found.get("instructions")
    status["instructions"] = instructions[:INSTRUCTIONS_LIMIT] if isinstance(instructions, str) else None
    return status


class ServerDiscovery:
    """Discovery Jobs, the worker API's discovery reports, and McpServer status (see the module docstring).

    Args:
        api: an API client with the operator's credentials.
        namespace: the operator's namespace.
        catalog: the operator's catalog (the McpServers, and which of their tools it serves).
        settings: the operator's settings (`bridge_image`, `pod_worker_url`, pod shape defaults).
        clock: the current time.
    """

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        catalog: KubernetesToolCatalog,
        settings: OperatorSettings,
        clock: Clock = utc_now,
    ) -> None:
        self.namespace = namespace
        self.catalog = catalog
        self.settings = settings
        self.clock = clock
        self._api = client.Apis(api)
        self._verified: dict[str, tuple[str, str, int, float]] = {}
        self._wake = asyncio.Event()

    def add_routes(self, app: web.Application) -> None:
        """Serve `GET <PATH>/input` and `POST <PATH>/result` on the worker API `app`."""
        app.router.add_get(PATH + contract.PATH_INPUT, self._input)
        app.router.add_post(PATH + contract.PATH_RESULT, self._result)

    def job_event(self) -> None:
        """A discovery Job changed (its watch event): run a pass soon."""
        self._wake.set()

    async def run(self, active: asyncio.Event) -> None:
        """Run passes until cancelled, while `active` is set (this replica leads)."""
        changed = self.catalog.subscribe()
        while True:
            if not active.is_set():
                await active.wait()
            changed.clear()
            self._wake.clear()
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the API server is away: the next pass retries
                logger.warning("MCP server discovery: a pass failed: %s", exc)
            await aio.first_of(changed.wait(), self._wake.wait(), asyncio.sleep(PASS_S))

    async def reconcile(self) -> None:
        """One pass over every McpServer: start discovery where needed, write failures and `Ready`."""
        listed = await client.call_json(
            self._api.batch.list_namespaced_job, self.namespace, label_selector=labels.MCPSERVER_LABEL
        )
        newest: dict[str, tuple[JsonObject, JobState]] = {}
        for job in listed.get("items") or []:
            server = str((job["metadata"].get("labels") or {}).get(labels.MCPSERVER_LABEL) or "")
            seen = job_state(job)
            if server not in newest or seen.created_at > newest[server][1].created_at:
                newest[server] = (job, seen)
        now = self.clock()
        verdicts = self.catalog.server_verdicts()
        for name, obj in self.catalog.servers().items():
            latest = newest.get(label_value(name))
            state: JobState | None = latest[1] if latest is not None else None
            status: JsonObject = obj.get("status") or {}
            generation = int(obj["metadata"].get("generation") or 1)
            if state is not None and state.ended and not state.succeeded and state.generation == generation:
                await self._failed(obj, latest[0] if latest else {}, status)
            if needs_discovery(obj, state, now):
                await self._start(obj)
            verdict = verdicts.get(name)
            if verdict is not None:
                desired = ready_status(verdict)
                if _differs(status, desired):
                    await self._patch(name, desired)

    async def _start(self, obj: JsonObject) -> None:
        name = str(obj["metadata"]["name"])
        try:
            server = parse_server_manifest(_manifest(obj), f"mcpserver/{name} in namespace {self.namespace}")
            job = build_discovery_job(obj, server, self.settings, iso_ms(self.clock()))
        except (InvalidToolManifest, ValueError) as exc:
            status: JsonObject = obj.get("status") or {}
            if status.get("lastError") != str(exc):
                await self._discovered_false(obj, "DiscoveryFailed", str(exc))
            return
        try:
            await client.call_json(self._api.batch.create_namespaced_job, self.namespace, cast(Any, job))
        except client.Conflict:
            return
        logger.info("mcpserver/%s: discovering its tools (Job %s)", name, job["metadata"]["name"])

    async def _failed(self, obj: JsonObject, job: JsonObject, status: JsonObject) -> None:
        """Write a failed discovery Job's reason as `lastError` (once)."""
        reason = await self._why(job)
        if status.get("lastError") != reason:
            await self._discovered_false(obj, "DiscoveryFailed", reason)

    async def _why(self, job: JsonObject) -> str:
        """Why a discovery Job failed: its bridge's termination message, else the Job's condition."""
        selector = f"job-name={job.get('metadata', {}).get('name', '')}"
        pods = await client.call_json(self._api.core.list_namespaced_pod, self.namespace, label_selector=selector)
        for pod in pods.get("items") or []:
            ended = observe.termination(pod)
            if ended is not None and ended.message:
                return f"discovery exited with code {ended.exit_code}: {ended.message}"
            problem = observe.start_problem(pod)
            if problem:
                return f"discovery did not start: {problem}"
        for condition in (job.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Failed":
                return f"discovery failed: {condition.get('reason')}: {condition.get('message') or ''}".strip()
        return "discovery failed"

    async def _discovered_false(self, obj: JsonObject, reason: str, message: str) -> None:
        status: JsonObject = obj.get("status") or {}
        generation = int(obj["metadata"].get("generation") or 1)
        previous = list(status.get("conditions") or [])
        condition = _condition(CONDITION_DISCOVERED, False, reason, message, previous, generation)
        await self._patch(
            str(obj["metadata"]["name"]), {"lastError": message, "conditions": _with(previous, condition)}
        )

    async def _patch(self, name: str, status: JsonObject) -> None:
        with contextlib.suppress(client.NotFound):  # deleted meanwhile
            await client.call(
                self._api.objects.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                self.namespace,
                SERVER_PLURAL,
                name,
                {"status": status},
                **MERGE_PATCH,
            )

    # ----------------------------------------------------------------------------------- the worker API side

    async def _input(self, request: web.Request) -> web.Response:
        found = await self._caller(request)
        if found is None:
            return web.json_response({"message": "unknown discovery"}, status=404)
        return web.json_response({"arguments": {}, "attempt": 1})

    async def _result(self, request: web.Request) -> web.Response:
        found = await self._caller(request)
        if found is None:
            return web.json_response({"message": "unknown discovery"}, status=404)
        name, _uid, generation = found
        if (request.content_length or 0) > MAX_REPORT_BYTES:
            return web.json_response({"message": f"a report is at most {MAX_REPORT_BYTES} bytes"}, status=413)
        try:
            raw = await request.content.read(MAX_REPORT_BYTES + 1)
            if len(raw) > MAX_REPORT_BYTES:
                return web.json_response({"message": f"a report is at most {MAX_REPORT_BYTES} bytes"}, status=413)
            fields = discovery_from_report(json.loads(raw))
        except ValueError as exc:
            refused = self.catalog.servers().get(name)
            if refused is not None:  # the tools it had stay served: only lastError and Discovered change
                try:
                    await self._discovered_false(refused, "DiscoveryFailed", f"not a discovery report: {exc}")
                except (client.ApiError, StoreUnavailable) as written:
                    logger.warning("mcpserver/%s: could not write its lastError: %s", name, written)
            return web.json_response({"message": f"not a discovery report: {exc}"}, status=400)
        obj = self.catalog.servers().get(name)
        previous = list(((obj or {}).get("status") or {}).get("conditions") or [])
        count = len(fields["tools"])
        discovered = _condition(
            CONDITION_DISCOVERED, True, "Discovered", f"listed {count} tool(s)", previous, generation
        )
        status = {
            **fields,
            "observedGeneration": generation,
            "discoveredAt": iso_ms(self.clock()),
            "lastError": None,
            "conditions": _with(previous, discovered),
        }
        try:
            await self._patch(name, status)
        except (client.ApiError, StoreUnavailable) as exc:
            logger.warning("mcpserver/%s: could not write its discovery: %s", name, exc)
            return web.json_response({"message": f"could not write the discovery: {exc}"}, status=503)
        logger.info("mcpserver/%s: discovered %d tool(s) (generation %d)", name, count, generation)
        self._wake.set()
        return web.json_response({})

    async def _caller(self, request: web.Request) -> tuple[str, str, int] | None:
        """`(server, its uid, the generation the Job discovers)` when the bearer token is a discovery pod's of
        the server in the path; `None` for anything else (all refusals alike).
        """
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header[:7].lower() == "bearer " else ""
        server = request.match_info["server"]
        if not token:
            return None
        digest = hashlib.sha256(token.encode()).hexdigest()
        known = self._verified.get(digest)
        if known is not None and known[3] > time.monotonic():
            return (known[0], known[1], known[2]) if known[0] == server else None
        try:
            async with asyncio.timeout(10.0):
                found = await self._verify(token)
        except (TimeoutError, client.ApiError, StoreUnavailable) as exc:
            logger.warning("worker API: could not verify a discovery pod's token (%s)", exc)
            return None
        if found is None:
            return None
        if len(self._verified) > 1000:
            self._verified.clear()
        self._verified[digest] = (*found, time.monotonic() + VERIFIED_FOR_S)
        return found if found[0] == server else None

    async def _verify(self, token: str) -> tuple[str, str, int] | None:
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [jobs.WORKER_TOKEN_AUDIENCE]},
        }
        answer = await client.call(self._api.auth.create_token_review, cast(Any, review))
        status = answer.status
        if not status.authenticated or jobs.WORKER_TOKEN_AUDIENCE not in (status.audiences or []):
            return None
        user = status.user
        if not str(user.username or "").startswith(f"system:serviceaccount:{self.namespace}:"):
            return None
        extra = user.extra or {}
        names, uids = extra.get(POD_NAME_CLAIM) or [], extra.get(POD_UID_CLAIM) or []
        if len(names) != 1 or len(uids) != 1:
            return None
        try:
            pod = await client.call_json(self._api.core.read_namespaced_pod, str(names[0]), self.namespace)
            job_ref = _controller(pod)
            if pod["metadata"].get("uid") != uids[0] or job_ref is None or job_ref.get("kind") != "Job":
                return None
            job = await client.call_json(self._api.batch.read_namespaced_job, str(job_ref["name"]), self.namespace)
        except client.NotFound:
            return None
        owner = _controller(job)
        if job["metadata"].get("uid") != job_ref.get("uid") or owner is None or owner.get("kind") != "McpServer":
            return None
        if not str(job["metadata"]["name"]).startswith(JOB_PREFIX):
            return None
        server = self.catalog.servers().get(str(owner.get("name")))
        if server is None or server["metadata"].get("uid") != owner.get("uid"):
            return None
        generation = job_state(job).generation
        return str(owner["name"]), str(owner["uid"]), generation


def _controller(obj: JsonObject) -> JsonObject | None:
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((ref for ref in refs if isinstance(ref, dict) and ref.get("controller")), None)


def _manifest(obj: JsonObject) -> JsonObject:
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {"name": obj["metadata"]["name"]},
        "spec": obj.get("spec"),
    }
