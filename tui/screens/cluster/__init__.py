"""The cluster at a glance: the Overview, the summary it draws, and the feed that keeps it current."""
