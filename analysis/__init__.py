"""Report layer: turns the JSON-lines rows under ``results/`` into the paper's tables and figures.

Nothing here imports torch or the ``bpd`` package: the report must run offline, in seconds, on any machine
that has the result files, including one where the models were never trained.
"""
