"""The scheduler module's source, read as text: what differs between kernels and architectures lives in
kernel/sio-compat.h, keyed by feature, and nothing in the module reads an x86-only register or stack slot (on
arm64, every phone, a probed function's return address is in the link register, not at the stack pointer)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from smartio.testbed import modbuild

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


CALLERS = KERNEL / "sio-callers.h"
# What kallsyms gives for callers of folio_wait_writeback(), and whether the wait is an integrity sync's (D_sync).
KALLSYMS_NAMES = {
    "__filemap_fdatawait_range": True,
    "__filemap_fdatawait_range.isra.0": True,              # a compiler clone
    "mpage_prepare_extent_to_map [ext4]": True,            # ext4 built as a module, as Debian builds it
    "writeback_iter": True,                                # 6.10+: write_cache_pages() wraps it
    "writeback_get_folio.llvm.9120463": True,              # LTO's promoted static (GKI kernels)
    "folio_prepare_writeback.lto_priv.0 [ext4]": True,
    "wait_on_page_writeback": True,
    "ext4_bio_write_folio [ext4]": False,                  # not an integrity sync's wait
    "truncate_inode_pages_range": False,
    "write_cache_pages_x": False,                          # a prefix is not the name
}


def test_a_folio_waits_caller_is_known_by_its_own_name(tmp_path):
    """The D_sync rule of the module (kernel/sio-callers.h, compiled as it is): a caller in a module, a compiler
    clone or an LTO-renamed static is still the caller it names."""
    prog = tmp_path / "callers.c"
    prog.write_text('#include <stdbool.h>\n#include <stdio.h>\n#include <string.h>\n'
                    f'#include "{CALLERS}"\n'
                    'int main(int argc, char **argv)\n{\n\tfor (int i = 1; i < argc; i++) {\n'
                    '\t\tchar buf[128];\n\t\tsnprintf(buf, sizeof(buf), "%s", argv[i]);\n'
                    '\t\tprintf("%d\\n", sio_sync_caller(buf));\n\t}\n\treturn 0;\n}\n')
    exe = tmp_path / "callers"
    subprocess.run(["gcc", "-Wall", "-Werror", "-o", str(exe), str(prog)], check=True)
    out = subprocess.run([str(exe), *KALLSYMS_NAMES], check=True, capture_output=True, text=True).stdout.split()
    assert dict(zip(KALLSYMS_NAMES, (o == "1" for o in out), strict=True)) == KALLSYMS_NAMES


def test_the_module_classifies_folio_waits_with_the_tested_rule():
    text = MODULE.read_text()
    assert '#include "sio-callers.h"' in text and "sio_sync_caller(name)" in text
    assert "sio_sync_callers[" not in text, "a second table of sync callers in the module"


def test_a_matrix_cell_links_the_sources_only_not_what_kbuild_generated(tmp_path):
    """modpost writes <module>.mod.c in the cell's directory: a link to kernel/'s own would have it overwrite the 6.1
    build's, and the next `make -C kernel` compiled the other kernel's module info into a .ko insmod refuses."""
    src, out = tmp_path / "kernel", tmp_path / "cell"
    src.mkdir()
    for name in ("smartio-iosched.c", "sio-compat.h", "Kbuild", "smartio-iosched.mod.c"):
        (src / name).write_text("")
    modbuild._link_sources(src, out)
    assert sorted(f.name for f in out.iterdir()) == ["Kbuild", "sio-compat.h", "smartio-iosched.c"]
