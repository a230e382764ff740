"""The scheduler module's source, read as text: what differs between kernels and architectures lives in
kernel/sio-compat.h, keyed by feature, and nothing in the module reads an x86-only register or stack slot (on
arm64, every phone, a probed function's return address is in the link register, not at the stack pointer)."""

from __future__ import annotations

import re
from pathlib import Path

KERNEL = Path(__file__).resolve().parent.parent / "kernel"
MODULE = KERNEL / "smartio-iosched.c"
COMPAT = KERNEL / "sio-compat.h"

# Registers and stack slots whose meaning is x86's: the stack pointer read as the return address, x86's pt_regs.
X86_ONLY = re.compile(r"kernel_stack_pointer\s*\(|regs->(?:sp|ip|ax|bx|cx|dx|si|di|bp)\b")


def test_the_module_reads_no_x86_only_register():
    lines = [f"{MODULE.name}:{n}: {line.strip()}" for n, line in enumerate(MODULE.read_text().splitlines(), 1)
             if X86_ONLY.search(line)]
    assert lines == []


def test_the_compat_header_reads_x86_registers_only_under_config_x86():
    text = COMPAT.read_text()
    for m in X86_ONLY.finditer(text):
        before = text[:m.start()]
        assert before.rfind("defined(CONFIG_X86)") > before.rfind("#endif"), \
            f"sio-compat.h:{before.count(chr(10)) + 1} reads an x86 register outside CONFIG_X86"


def test_kernel_versions_are_tested_only_in_the_compat_header():
    assert "LINUX_VERSION_CODE" not in MODULE.read_text()
