"""current and task_struct's pid and comm from a kernel's code (kpsdk/kernel/taskcode.py).

Ground truth for the rule: Debian's amd64 kernel has both BTF and the code, so the per-cpu
offset of ``current_task`` and the offsets of ``pid`` and ``comm`` that
``dump_stack_print_info``'s code shows must be those the kernel's BTF and symbols say.  On
the kernels that have no BTF (i386, arm, ppc64le), the guest's own trace lines are the
ground truth: tests/test_kernel_arches.py compares the comm-pid kpsdk shows with them.

And code that does not read the way the rule expects (no current, two candidates for pid)
is refused: the prefix says ``<...>-0`` there rather than a wrong field.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import keystone
import pytest

import kpsdk
from kpsdk.binfmt.elfimage import parse_elf
from kpsdk.errors import TargetError
from kpsdk.kernel.kallsyms import extract_vmlinux, load_kernel_symbols
from kpsdk.kernel.taskcode import current_fields
from kpsdk.kernel.tasks import code_task_layout, kernel_task_layout

FUNCTION = "dump_stack_print_info"


def test_amd64_code_shows_what_btf_says(debian_kernel: Path, tmp_path: Path) -> None:
    arch = kpsdk.get_registry().arch("x86_64")
    vmlinux, _ = extract_vmlinux(debian_kernel)
    image = parse_elf(vmlinux, tmp_path / "vmlinux")
    symbols = load_kernel_symbols(debian_kernel)
    addr = symbols.resolve(FUNCTION)
    found = symbols.lookup(addr)
    assert found is not None

    def read(at: int, size: int) -> bytes:
        data = image.read(at, size)
        assert data is not None
        return data

    from_code = code_task_layout(read, (addr, found[2]), arch)
    from_btf = kernel_task_layout(debian_kernel, arch)
    assert (from_code.current, from_code.pid, from_code.comm) == (from_btf.current, from_btf.pid, from_btf.comm)
    assert FUNCTION in from_code.how


def _code(arch: str, asm: str) -> bytes:
    mode = {"i386": (keystone.KS_ARCH_X86, keystone.KS_MODE_32),
            "arm": (keystone.KS_ARCH_ARM, keystone.KS_MODE_ARM),
            "ppc64le": (keystone.KS_ARCH_PPC, keystone.KS_MODE_PPC64 | keystone.KS_MODE_LITTLE_ENDIAN)}[arch]
    encoding, _ = keystone.Ks(*mode).asm(asm, 0x1000)
    return bytes(encoding)


#: each arch's way of reading current, then its pid (a 32-bit load) and comm (an address)
SHAPES = {
    "i386": ("mov edx, dword ptr fs:[0xc1e5e6e8]; mov ecx, dword ptr fs:[0xc1e598b8]; "
             "lea eax, [edx + 0x584]; push dword ptr [edx + 0x454]; push ecx; ret", (0xC1E5E6E8, 0x454, 0x584)),
    "arm": ("mrc p15, #0, r5, c13, c0, #3; ldr r3, [r5, #8]; add r11, r5, #0x780; ldr r10, [r5, #0x630]; bx lr",
            (0, 0x630, 0x780)),
    "ppc64le": ("ld 30, 0x908(13); lhz 26, 8(13); lwz 25, 0x7e8(30); addi 30, 30, 0x9e0; "
                "addis 30, 2, -0x1c; addi 30, 30, 0x40; blr", (0x908, 0x7E8, 0x9E0)),
}


@pytest.mark.parametrize("arch", sorted(SHAPES))
def test_each_arch_reads_its_own_shape(arch: str) -> None:
    """The shapes of Debian's own dump_stack_print_info (6.1): i386 also reads cpu_number
    through %fs (printed, never dereferenced), arm thread_info.cpu off current, ppc64 reuses
    the register for something else after taking comm's address."""
    the_arch = kpsdk.get_registry().arch(arch)
    assert the_arch.kernel_tasks is not None and the_arch.kernel_tasks.code is not None
    asm, want = SHAPES[arch]
    found = current_fields(_code(arch, asm), 0x1000, the_arch, the_arch.kernel_tasks.code)
    assert (found.current, found.pid, found.comm) == want


@pytest.mark.parametrize(("arch", "asm", "why"), [
    ("i386", "mov edx, dword ptr [0xc1e5e6e8]; lea eax, [edx + 0x584]; push dword ptr [edx + 0x454]; ret",
     "0 candidates"),  # not through %fs: not a per-cpu read
    ("i386", "mov edx, dword ptr fs:[0x100]; mov ecx, dword ptr fs:[0x200]; lea eax, [edx + 0x584]; "
             "push dword ptr [ecx + 0x454]; ret", "2 candidates"),
    ("arm", "mrc p15, #0, r5, c13, c0, #3; ldr r3, [r5, #0x10]; ldr r2, [r5, #0x630]; add r11, r5, #0x780; bx lr",
     "reads 2 32-bit fields"),
    ("arm", "mrc p15, #0, r5, c13, c0, #2; ldr r2, [r5, #0x630]; add r11, r5, #0x780; bx lr", "0 candidates"),
    ("ppc64le", "ld 30, 0x908(13); lwz 25, 0x7e8(30); blr", "the address of 0"),
    ("ppc64le", "ld 30, 0x908(13); addi 30, 30, 0x9e0; lwz 25, 0x7e8(30); blr", "reads 0 32-bit"),
])
def test_code_that_does_not_read_so_is_refused(arch: str, asm: str, why: str) -> None:
    """Whatever the code does not say unambiguously is refused with the reason (the trace
    prefix then prints ``<...>-0`` and the reason is kept)."""
    the_arch = kpsdk.get_registry().arch(arch)
    assert the_arch.kernel_tasks is not None and the_arch.kernel_tasks.code is not None
    with pytest.raises(TargetError, match=why):
        current_fields(_code(arch, asm), 0x1000, the_arch, the_arch.kernel_tasks.code)


def test_an_image_without_btf_says_why_once(arch_kernel: Callable[[str], Path], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian's ppc64el kernel has no BTF: kernel_task_layout says so, and says the same from
    the cache (by the image's sha256) the next time, without unpacking the image again."""
    image = arch_kernel("ppc64le")
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path))
    arch = kpsdk.get_registry().arch("ppc64le")
    with pytest.raises(TargetError, match="no .BTF section") as first:
        kernel_task_layout(image, arch)
    assert [p.name.endswith(".ppc64le.v2.missing") for p in (tmp_path / "tasks").iterdir()] == [True]
    monkeypatch.setattr("kpsdk.kernel.tasks._layout_of", lambda *a: pytest.fail("the image was read again"))
    with pytest.raises(TargetError) as second:
        kernel_task_layout(image, arch)
    assert str(second.value) == str(first.value)
