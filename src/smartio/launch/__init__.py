"""`smartio launch`: the start-up time of an application, measured for real or replayed from a recording, cold or
warm, alone or beside a background writer (seed 000 section 7.4, seed 001 section 6.3, seed 002's Mobigen).

    commands.py    `run` and `replay`: what each launches, set up on the target and timed by measure
    measure.py     the timing loop shared by `run` and `replay`: caches, background fio, repeats, statistics
    launcher.py    one launch of a real command, timed from exec to exit, and the cache drop before a cold one
    background.py  the background workloads, as fio job sets (fio is the one I/O engine)
    trace/         the trace format and `record`: strace of a start-up, turned into file-level operations
    replay.py      lays a trace's files out under a directory and replays its operations with their think times
    report.py      the text table
    compare/       `smartio compare launch`: the comparison per scheduler in the testbed
"""
