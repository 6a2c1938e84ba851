"""Closing a kubernetes_asyncio `ApiClient` completely.

Its aiohttp session talks TLS to the API server; `close()` starts closing those transports, and an
SSL transport needs a few more loop iterations to finish (aiohttp documents this as "graceful
shutdown"). Stopping the loop right after `close()` leaves them to the garbage collector, which
warns about unclosed transports. `close_api_client` waits a moment for them.
"""

from __future__ import annotations

import asyncio
from typing import Final

from kubernetes_asyncio.client import ApiClient

TLS_CLOSE_GRACE_S: Final = 0.1


async def close_api_client(api_client: ApiClient) -> None:
    """Close `api_client` and give its TLS connections `TLS_CLOSE_GRACE_S` seconds to finish closing."""
    await api_client.close()
    await asyncio.sleep(TLS_CLOSE_GRACE_S)
