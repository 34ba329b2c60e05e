"""The control plane's side of the model mirrors: which it has, their states, and calls to them.

- ``set``: MirrorSet, the configured mirrors probed every probe_interval_s and
  called in order;
- ``views``: the management API's answers (llmgw/mirror/wire.py) as admin.proto views;
- ``hub``: hub-API reads (pinning, planning) through the mirrors, first up first.
"""
