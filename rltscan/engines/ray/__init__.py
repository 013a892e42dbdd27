"""``--engine ray``: the shard task of :mod:`rltscan.engines.shards` on Ray.

Owns the only import of ray (lazy). It is handed the task function, so it imports
no other engine; may import errors only. Never api or cli.
"""
