"""Block-trace recording and characterisation (seed 004's metrics, seed 002's MOST file attribution).

record (tracefs) -> Trace (events.py) <- formats.py (ours, blktrace binary, blkparse or tracefs text; compressed)
Trace -> analyze.py (metrics) -> report.py (HTML with plots); files.py attributes sectors to files (FIEMAP).
"""
