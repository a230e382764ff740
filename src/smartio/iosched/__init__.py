"""The smartio scheduler module's contract in Python (kernel/smartio-iosched.c), and its pure Python twin.

- tunables: the module's sysfs tunables (name, unit, default, range, role), one table;
- debugfs: its debugfs files (stats, inflight, phase, kprobes, qasio_log, the FIFO lists) and their parsers;
- policy: the module's dispatch decision for one class as a pure function (the device model's read-first policy);

The model check (trace/modelcheck.py, `smartio trace model-check`) holds a block trace recorded under the module
against that twin. Nothing here imports the rest of smartio above it: the device model (flashdev/model.py) and the
model check build on it; the block layer's own per-device counters, beside which the module's sit, are read by
smartio.blockdev.diskstat.
"""
