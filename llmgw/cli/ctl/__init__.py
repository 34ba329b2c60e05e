"""``llmgw ctl``: scriptable operations against a running control plane, one module per group.

``app`` names every command of the ``ctl`` group and the module it lives in
(``cluster`` for the control plane, nodes and replicas; ``models``, ``keys``,
``mcp`` …); ``call`` runs one admin call and prints its reply.
"""
