"""Several control planes on one store: the leader lease, the members, and the roles they play.

``LeaderLease`` decides, by a lease in the store, which control plane may
reconcile and command agents at this instant; ``Members`` keeps every control
plane's row (what ``ctl status`` lists and agents get as their failover list).
"""

from gatewayd.cluster.lease import LeaderLease
from gatewayd.cluster.members import Members

__all__ = ["LeaderLease", "Members"]
