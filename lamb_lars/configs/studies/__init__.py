"""Ready-made study configs for ``python -m lamb_lars.study run --config=lamb_lars/configs/studies/<name>.py``.

Each is a base training config × sub-sweeps (lamb_lars/study/running/sweep.py) plus the analysis settings the report
uses
(lamb_lars/study/report/report.py). Shared pieces live in ``common``.
"""
