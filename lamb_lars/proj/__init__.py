"""Paper projects, one folder each (big_vision's ``proj/<name>/``): the code, configs and published numbers that
belong to one paper's reproduction. A project may import everything in lamb_lars; nothing outside proj/ imports a
project (tests/test_layout.py). The generic study report reaches a project only through the import path a study
config names (``analysis.reference``; lamb_lars/study/report/reference.py).
"""
