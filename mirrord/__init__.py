"""The model mirror daemon (``llmgw mirror serve``).

Content-addressed blobs and commit-pinned revisions under a data dir
(mirrord.store), filled by pulls and uploads (mirrord.pull) and by peers
(mirrord.peers), served over one port (mirrord.http, mirrord.api) as the
Hugging Face hub API, a package index and blobs by digest. It imports
``llmgw`` and ``proto`` only, never another daemon or the console.
"""
