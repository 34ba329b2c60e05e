"""Screens ≡ commands: the console against `llmgw ctl`, over one live cluster (test_parity.py);
how each screen is opened and compared (kit.py), each action performed and read back
(actions.py), and the parts of each screen group (batches, mcp_gateway, mirror, models,
settings, weights)."""
