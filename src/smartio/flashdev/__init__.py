"""The emulated flash device: named profiles, the nbdkit timing filter built on demand, and the server wrapper.

    from smartio.flashdev import load_profile, FlashServer
    with FlashServer(load_profile("s5-emmc"), 256 << 20, workdir) as dev:
        ...  # dev.uri is an nbd+unix URI for QEMU or fio's nbd engine
"""

from smartio.flashdev.build import build_filter
from smartio.flashdev.profiles import Profile, ProfileError, all_profiles, load_profile
from smartio.flashdev.server import FlashServer

__all__ = ["FlashServer", "Profile", "ProfileError", "all_profiles", "build_filter", "load_profile"]
