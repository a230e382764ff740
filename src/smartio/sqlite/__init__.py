"""`smartio bench sqlite`: Mobibench's SQLite workload on the system's SQLite, and where its block writes go (seed 002).

settings  the options (declared once: flag, help, default, choices) and their checks
shim      the LD_PRELOAD shim (syncshim.c) that chooses fsync()/fdatasync() under the system's SQLite and logs
          every sync call with the synced file's extents
worker    the child process that runs the transactions (one statement per transaction) and times them
run       the host side: scratch directory, repeats, cleanup (also on Ctrl-C), optional block trace
fsjournal where the filesystem's own journal lives (ext4 journal inode or external device, xfs log)
attribute block writes per transaction split by file: database, rollback journal, WAL, fs journal, metadata
report    the terminal tables, and Figure 4 of the paper beside ours
"""
