"""Turning result documents into what people read: terminal tables (tables.py) and plots (plots.py)."""
