"""smartio: measure, trace and fix the read latency that writes cause on flash storage."""

__version__ = "0.1.0"
