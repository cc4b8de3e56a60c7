"""pgrecall on a Citus cluster: distribute the user tables by user_id, and check a cluster.

docs/scaling.md has the whole story. Every user table (app/roles.py DISTRIBUTED_TABLES) becomes
a hash-distributed table on `user_id`, all co-located with `conversations`, so all of one user's
rows sit in one shard group on one worker and every statement the service sends (each names its
user: tests/repositories/test_user_scope.py) is a router query on that worker. `api_keys` stays a
plain table of the coordinator: authentication reads it by token hash before it knows the user.
Shared spaces' `spaces` and `space_members` become reference tables, a copy on every node, which
the space policies read where a shard's statement runs (issue 43; docs/scaling.md, "Shared
spaces on Citus").

`distribute` (distribute.py) runs as the owner role (Citus lets a table's owner distribute it)
after `pgrecall db upgrade`; it is idempotent. `cluster_status` (doctor.py) is doctor's check.
metadata.py reads where Citus has put each table; policies.py gives the shards their tables'
row-level security.
"""

from app.citus.distribute import distribute
from app.citus.doctor import PROBE_PREFIX, cluster_status, probe_users, visibility_advice
from app.citus.metadata import (
    ANCHOR,
    DEFAULT_SHARD_COUNT,
    DISTRIBUTION_COLUMN,
    CitusError,
    TableDistribution,
    citus_version,
    distribution,
    distribution_problems,
)
from app.citus.policies import (
    policy_drift,
    scope_spaces_function,
    shard_expression,
    shard_policy_statement,
    sync_shard_policies,
)

__all__ = [
    "ANCHOR",
    "DEFAULT_SHARD_COUNT",
    "DISTRIBUTION_COLUMN",
    "PROBE_PREFIX",
    "CitusError",
    "TableDistribution",
    "citus_version",
    "cluster_status",
    "distribute",
    "distribution",
    "distribution_problems",
    "policy_drift",
    "probe_users",
    "scope_spaces_function",
    "shard_expression",
    "shard_policy_statement",
    "sync_shard_policies",
    "visibility_advice",
]
