"""The Nodes screen: the node table and pane, its actions (cordon, drain, remove, label) and Add node."""
