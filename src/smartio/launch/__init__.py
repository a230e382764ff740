"""`smartio launch`: the start-up time of an application, measured for real or replayed from a recording, cold or
warm, alone or beside a background writer (seed 000 section 7.4, seed 001 section 6.3, seed 002's Mobigen).

    measure.py     the timing loop shared by `run` and `replay`: caches, background fio, repeats, statistics
    background.py  the background workloads, as fio job sets (fio is the one I/O engine)
    trace.py       the trace format and `record`: strace of a start-up, turned into file-level operations
    replay.py      lays a trace's files out under a directory and replays its operations with their think times
    report.py      the text table
"""
