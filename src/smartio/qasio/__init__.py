"""`smartio bench qasio`: seed 001's microbenchmarks M1-M5 beside a background buffered writer.

`workload` defines the benchmarks (the paper's words, the scaled sizes, the system calls each makes, and the
summary of their latencies); `run` carries them out on a mounted ext4 directory with the writeback settings and the
scheduler's QASIO tunables set for the run; `report` prints a run, and `smartio.qasio.compare` the paper's Table 2
and Figure 8 per scheduler.
"""
