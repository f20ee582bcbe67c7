"""Aggregating trained and evaluated runs into tables and figures (``python -m hnnsym.report``,
``python -m hnnsym.table1``).

``runs`` finds and reads run dirs; ``tables`` groups them, takes mean ± std over seeds and renders
such tables (Markdown, LaTeX, CSV); ``figures`` draws them; ``report`` is the generic report and
``table1`` the paper's Table 1 with its noise sweep, both built on ``tables``; ``stage`` holds the
two stages the Hydra entry points call. This module imports none of them.
"""
