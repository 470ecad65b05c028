"""The workloads scenario files name: the built-ins, Ray's failure surface, Ray's libraries,
``raychaos attack``'s program under test, the flagship and the demo, and the registry by name.

Private parts; a user's own workload subclasses :class:`scenarios.Workload`.
"""

__all__: list[str] = []
