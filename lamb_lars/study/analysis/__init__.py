"""The analysis layer of a study: pure functions of records (lamb_lars/study/records.py), notebook-friendly."""
