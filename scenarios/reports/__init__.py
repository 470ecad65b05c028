"""Reports of a run: the terminal's progress line and tables, ``summary.json``, ``junit.xml``
and the self-contained ``report.html``.

Private parts; :func:`scenarios.write_reports` and :func:`scenarios.summary` are the public ones.
"""

__all__: list[str] = []
