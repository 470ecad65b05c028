"""The lessons: each pitfall of the reference chapter run as the mistake and the fix, measured,
one module per chapter section, and their terminal output (``raychaos lessons``/``explain``).

Private parts; reached through the ``raychaos`` command.
"""

__all__: list[str] = []
