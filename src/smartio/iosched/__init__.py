"""The smartio scheduler module's contract in Python (kernel/smartio-iosched.c), and its pure Python twin.

- tunables: the module's sysfs tunables (name, unit, default, range, role), one table;
- debugfs: its debugfs files (stats, inflight, phase, kprobes, qasio_log, the FIFO lists) and their parsers;
- diskstat: the block layer's per-device counters (/sys/block/<dev>/stat) that the module's counters sit beside;
- policy: the module's dispatch decision for one class as a pure function (the device model's read-first policy);
- modelcheck: checks a block trace recorded under the module against that twin (`smartio trace model-check`).

Nothing here imports the rest of smartio above it (the testbed, experiments, the CLI): the device model
(flashdev/model.py) and the testbed's model-check run (testbed/modelcheck.py) build on it.
"""
