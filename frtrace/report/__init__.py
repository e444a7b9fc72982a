"""Stage 3, reporting: a ``Report`` in, text out. Pure and deterministic (no times, no
absolute paths).

``select`` narrows a report for display (``--pg``, ``--ranks``), never the analysis;
``document`` turns it into blocks once (wording and limits in ``common``, next steps in
``nextsteps``); one renderer per format (``text``, ``markdown``, ``html`` with its pictures
``heatmap`` and ``waitsvg``, ``json``). ``show`` renders raw entries side by side
(``frtrace show``) straight from the tables.
"""
