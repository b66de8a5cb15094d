"""The HTML pages: one iteration (``iteration``, with ``values`` and ``capacity``) and the whole
experiment (``experiment``, with ``charts`` and ``dgd_diff``).

Views of files, never of a cluster (``.importlinter``), so an archived experiment renders the same.
"""
