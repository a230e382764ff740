"""The VM testbed: Debian's Linux 6.1 cloud kernel in QEMU with emulated flash disks."""
