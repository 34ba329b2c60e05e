"""``llmgw ctl``: scriptable operations against a running control plane, one module per group.

``app`` is the ``ctl`` group with its node, replica and status commands; each
other module adds its commands to it (``llmgw/cli/main.py`` imports them all).
"""
