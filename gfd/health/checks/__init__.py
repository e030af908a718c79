"""The GPU health checks, one module each: its logic, its condition reasons, its helpers.

Each module holds one class that satisfies :class:`gfd.health.check.Check`; the registry
(:mod:`gfd.health.registry`) names them. A new check is a new module here, its name in
:data:`gfd.config.values.HEALTH_CHECKS` (what users may ask for) and one line in the
registry.
"""
