"""Outputs: one document model (document.py) built from results files (results_doc.py) or comparisons
(compare_doc.py), rendered to the terminal, Markdown and HTML (terminal.py, markdown.py, html.py)."""
