"""`python -m smartio.launch.compare PLAN_JSON OUT_DIR`: the guest's side of the launch comparison."""

from __future__ import annotations

from smartio.launch.compare.guest import guest_main

if __name__ == "__main__":
    from smartio.compare.run import guest_entry

    guest_entry(guest_main)
