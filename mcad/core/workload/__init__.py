"""What an AppWrapper asks for, read from its spec: quantities, resource lists, pod sets
(where a wrapped object's pod templates are and how many pods they make), the demand
(every pod set with its requests, the total, the gang's minimum) and the topology it asks
its pods to share.

Owns: reading the wire form into these values, and the sentences that refuse it.
May not touch: anything about clusters, quota or time (the layers above read this one;
it reads none of them).
"""
