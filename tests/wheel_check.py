"""What a cluster needs of rmq's wheel, checked on a built one (`make wheel` runs it; so does
tests/readme_cluster.py): auditwheel finds it consistent with manylinux_2_17 (manylinux2014, glibc 2.17: RHEL 7
and later), the extension asks for no glibc symbol version newer than 2.17, and it carries no debug sections and
no symbol table (stripped).

    python tests/wheel_check.py target/wheels/rmq-*.whl     # prints the facts; exit 1 if one is wrong
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

#: The oldest baseline the wheel is built for (`maturin build --compatibility manylinux2014`).
TAG = "manylinux_2_17_x86_64"
GLIBC = (2, 17)


@dataclass(frozen=True)
class WheelFacts:
    wheel: Path
    wheel_bytes: int
    extension: str
    extension_bytes: int
    auditwheel_tag: str | None
    glibc_max: tuple[int, ...]
    debug_sections: tuple[str, ...]
    has_symtab: bool

    def problems(self) -> list[str]:
        out = []
        if TAG not in self.wheel.name:
            out.append(f"the wheel's name has no {TAG} tag: {self.wheel.name}")
        if self.auditwheel_tag != TAG:
            out.append(f"auditwheel says {self.auditwheel_tag}, not {TAG}")
        if self.glibc_max > GLIBC:
            out.append(f"the extension needs GLIBC_{'.'.join(map(str, self.glibc_max))}, newer than 2.17")
        if self.debug_sections:
            out.append(f"the extension carries debug sections {', '.join(self.debug_sections)}")
        if self.has_symtab:
            out.append("the extension is not stripped (it has a .symtab)")
        return out


def auditwheel_tag(wheel: Path) -> str | None:
    """The platform tag `auditwheel show` finds the wheel consistent with."""
    proc = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True, check=True
    )
    m = re.search(r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s+"([^"]+)"', proc.stdout)
    return m.group(1) if m else None


def facts(wheel: Path) -> WheelFacts:
    with zipfile.ZipFile(wheel) as z:
        [name] = [n for n in z.namelist() if n.startswith("rmq/_native") and n.endswith(".so")]
        data = z.read(name)
    elf = ELFFile(io.BytesIO(data))
    versions: set[tuple[int, ...]] = set()
    for section in elf.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for _, auxiliaries in section.iter_versions():
                for aux in auxiliaries:
                    m = re.fullmatch(r"GLIBC_([0-9.]+)", str(aux.name))
                    if m:
                        versions.add(tuple(int(x) for x in m.group(1).split(".")))
    sections = [s.name for s in elf.iter_sections()]
    return WheelFacts(
        wheel=wheel,
        wheel_bytes=wheel.stat().st_size,
        extension=name,
        extension_bytes=len(data),
        auditwheel_tag=auditwheel_tag(wheel),
        glibc_max=max(versions, default=(0,)),
        debug_sections=tuple(s for s in sections if s.startswith(".debug")),
        has_symtab=".symtab" in sections,
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: wheel_check.py WHEEL", file=sys.stderr)
        return 2
    f = facts(Path(argv[0]))
    print(
        f"{f.wheel.name}: {f.wheel_bytes / 1e6:.2f} MB; {f.extension} {f.extension_bytes / 1e6:.2f} MB; "
        f"auditwheel: {f.auditwheel_tag}; newest glibc symbol: GLIBC_{'.'.join(map(str, f.glibc_max))}; "
        f"debug sections: {len(f.debug_sections)}; symbol table: {'yes' if f.has_symtab else 'no'}"
    )
    for p in f.problems():
        print(f"wheel_check: {p}", file=sys.stderr)
    return 1 if f.problems() else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
