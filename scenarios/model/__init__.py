"""What a scenario is: the file's model and its schema, the workload contract, the records of a run.

Private parts; what users write code against is exported by :mod:`scenarios`.
"""

__all__: list[str] = []
