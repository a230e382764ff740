"""`smartio compare`: the same experiment under several I/O schedulers on one emulated device, in one VM session.

spec   what to run (schedulers with optional tunables, experiment, sizes), validated on the host
guest  runs inside the testbed VM: switch, `smartio bench`, restore
run    the host side: boot once, gather one document (results.<scheduler>.read_slowdown.seq, ...)
report the paper's Figure 11 and Figure 12 as tables and PNG plots
"""
