"""Aggregating trained and evaluated runs into tables and figures (``python -m hnnsym.report``,
``python -m hnnsym.table1``, ``python -m hnnsym.table_ddlm``).

``runs`` finds and reads run dirs; ``tables`` groups them, takes mean ± std over seeds and renders
such tables (Markdown, LaTeX, CSV); ``figures`` draws them; ``report`` is the generic report,
``table1`` the paper's Table 1 with its noise sweep and ``table_ddlm`` Aoshima et al.'s Tables 2–3, all
built on ``tables``; ``stage`` holds the stages the Hydra entry points call. This module imports
none of them.
"""
