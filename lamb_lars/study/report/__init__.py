"""The report layer of a study: the README.md and PNG figures of a published folder, rendered from the analysis
layer's results (report.py composes the sections; plots.py draws, markdown.py formats). It imports nothing from
running or publishing."""
