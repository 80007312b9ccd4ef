"""What the benchmarks in ``ops/bench`` share: the stacks they start, the synthetic data, the
scripted model's replies and process, the runs and their tables.

How the benchmarks run: ``.venv/bin/python ops/bench/NAME.py`` from the checkout (with
``PYTHONPATH=.`` when the venv belongs to another checkout). Python puts a script's own folder
first on its path, so each script finds this package as ``benchlib``; nothing else edits the
path. A script imports this package and memq's own (``pipeline``, ``workers``, ``memq``), never
another script and never ``tests``: the scripted model and the private services the tests use
run as processes of their own (``benchlib.model``, ``benchlib.services``).
``tests/unit/test_bench_layout.py`` holds them to that.
"""
