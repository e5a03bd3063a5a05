"""Everything a person sees: rich tables, progress, matplotlib charts, the HTML/Markdown report.

Views take numbers (DataFrames, dicts, dataclasses) and return or print text and images; they
never measure, and analysis never imports them. One module per verb's results (``sweep``,
``trace``, ``topo``, ``plan``, ``check``, ``gap``, ``p2p``, ``moe``), the ``report``, ``show``
(any dir), and what they share (``console``, ``charts``).
"""
