"""The Settings screen: the cluster's kept settings, as ``llmgw ctl config`` shows and changes them."""
