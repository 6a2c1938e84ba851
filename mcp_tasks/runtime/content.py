"""Content blocks and input requests a tool builds, as plain dicts (MCP 2026-07-28 `ContentBlock`).

A tool's `CallToolResult.content` may hold text, image, audio, embedded resources and resource links,
and the result may add `structuredContent` (checked against the tool's `outputSchema`). Binary data is
given as bytes and sent base64-encoded. Standard library only.

Example:
    from mcp_tasks.runtime import content

    return {"content": [content.text("Chart:"), content.image(png_bytes, "image/png")]}
"""

from __future__ import annotations

import base64
from typing import Any

Json = dict[str, Any]


def text(value: str) -> Json:
    """A `TextContent` block."""
    return {"type": "text", "text": value}


def image(data: bytes, mime_type: str) -> Json:
    """An `ImageContent` block (`mime_type` e.g. `image/png`)."""
    return {"type": "image", "data": base64.b64encode(data).decode("ascii"), "mimeType": mime_type}


def audio(data: bytes, mime_type: str) -> Json:
    """An `AudioContent` block (`mime_type` e.g. `audio/wav`)."""
    return {"type": "audio", "data": base64.b64encode(data).decode("ascii"), "mimeType": mime_type}


def embedded_text(uri: str, value: str, mime_type: str = "text/plain") -> Json:
    """An `EmbeddedResource` block holding text contents."""
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "text": value}}


def embedded_blob(uri: str, data: bytes, mime_type: str) -> Json:
    """An `EmbeddedResource` block holding binary contents."""
    blob = base64.b64encode(data).decode("ascii")
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "blob": blob}}


def resource_link(uri: str, name: str, mime_type: str | None = None, size: int | None = None) -> Json:
    """A `ResourceLink` block (the client reads it with `resources/read`); `size` in bytes."""
    link: Json = {"type": "resource_link", "uri": uri, "name": name}
    if mime_type is not None:
        link["mimeType"] = mime_type
    if size is not None:
        link["size"] = size
    return link


def form_request(message: str, properties: Json, required: list[str] | None = None) -> Json:
    """An `elicitation/create` input request in form mode (`requestedSchema` built from `properties`)."""
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
    }
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


def url_request(message: str, url: str, elicitation_id: str) -> Json:
    """An `elicitation/create` input request in URL mode: the user completes `url` out of band."""
    return {
        "method": "elicitation/create",
        "params": {"mode": "url", "message": message, "url": url, "elicitationId": elicitation_id},
    }


def sampling_request(messages: list[Json], max_tokens: int, **params: Any) -> Json:
    """A `sampling/createMessage` input request; `params` adds e.g. `systemPrompt`, `modelPreferences`."""
    return {"method": "sampling/createMessage", "params": {"messages": messages, "maxTokens": max_tokens, **params}}


def roots_request() -> Json:
    """A `roots/list` input request."""
    return {"method": "roots/list", "params": {}}
