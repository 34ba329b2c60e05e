"""The node console (``sudo llmgw`` on a node): this machine's agent, GPUs and engines.

It reads the agent's local status socket and NVML directly, so it works with
no control plane and no admin token. ``run_node_console(paths)`` opens it.
"""

from tui.node.app import NodeConsole, run_node_console

__all__ = ["NodeConsole", "run_node_console"]
