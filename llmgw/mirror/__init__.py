"""What the control plane, the CLI and the mirror daemon share about the model mirror.

- ``config``: server.yaml's ``mirror:`` section and mirror.yaml (``llmgw mirror serve``);
- ``wire``: the JSON the mirror's management API (``/v1/…``) speaks, both ways;
- ``names``: what a repository, revision or file name may be;
- ``client``: the management API's client (the control plane's side).
"""
