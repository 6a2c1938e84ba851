"""The aiohttp MCP gateway: Streamable HTTP, method dispatch, sync-vs-task decision, MRTR, listen, artifacts."""

from mcp_tasks.gateway.app import MCP_PATH, create_app, create_runner
from mcp_tasks.gateway.auth import Authenticator, LocalAuthenticator, TokenFileAuthenticator
from mcp_tasks.gateway.context import Services
from mcp_tasks.gateway.settings import GatewaySettings

__all__ = [
    "MCP_PATH",
    "Authenticator",
    "GatewaySettings",
    "LocalAuthenticator",
    "Services",
    "TokenFileAuthenticator",
    "create_app",
    "create_runner",
]
