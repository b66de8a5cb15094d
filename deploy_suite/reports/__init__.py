"""The HTML pages: one iteration (``iteration``, with ``values`` and ``capacity``) and the whole
experiment (``experiment``, with ``charts`` and ``dgd_diff``).

Views of files, never of a cluster (``.importlinter``), so an archived experiment renders the same.
Each module builds a view model; the markup is the Jinja2 templates of ``templates/``, rendered by
``markup`` (docs/reports.md).
"""
