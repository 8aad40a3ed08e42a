"""shellgate-agents: a shellgate server as the OpenAI Agents SDK's sandbox.

from shellgate_agents import ShellgateSandboxClient, ShellgateSandboxClientOptions

RunConfig(sandbox=SandboxRunConfig(client=ShellgateSandboxClient(),
                                   options=ShellgateSandboxClientOptions()))
"""

from ._http import ShellgateApiError
from .sandbox import (
    ShellgateSandboxClient,
    ShellgateSandboxClientOptions,
    ShellgateSandboxSession,
    ShellgateSandboxSessionState,
)

__version__ = "0.1.0"

__all__ = [
    "ShellgateApiError",
    "ShellgateSandboxClient",
    "ShellgateSandboxClientOptions",
    "ShellgateSandboxSession",
    "ShellgateSandboxSessionState",
    "__version__",
]
