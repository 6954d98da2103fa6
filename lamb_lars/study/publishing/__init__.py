"""The publishing layer of a study: a finished workdir becomes a published folder (runs.csv, evals.csv, the report
recomputed from them, manifest.json), and ``verify`` checks such a folder (provenance.py). It reads the running
layer's store and workdir; the running layer imports nothing from it."""
