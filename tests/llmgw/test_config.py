def test_engines_listen_on_loopback_only_when_every_control_plane_is_on_this_machine():
    # Guards engines bound to 127.0.0.1 on a node whose control plane is elsewhere:
    # the gateway routes to the node's address and was refused.
    from llmgw.config import AgentConfig

    local = AgentConfig(node_id="n1", control_planes=["127.0.0.1:7070"])
    remote = AgentConfig(node_id="n1", control_planes=["10.0.0.1:7070", "127.0.0.1:7070"])
    pinned = AgentConfig(node_id="n1", control_planes=["10.0.0.1:7070"], engine_host="10.0.0.9")
    assert local.engines_listen == "127.0.0.1"
    assert remote.engines_listen == "0.0.0.0"
    assert pinned.engines_listen == "10.0.0.9"
