"""The wheels a GPU run carries for vLLM: vLLM's own and every package it needs that the device image lacks.

The device machine reaches no registry and its image (torch 2.11.0+cu130, transformers 5.17, no vLLM) is listed in
benchmarks/device_image_packages.txt. This walks vLLM's requirements for the device's Python 3.12 on x86-64, downloads
each missing one (`pip download --no-deps`), reads its own requirements from the wheel, and goes on, skipping what the
image holds and the optional kernel packages vLLM imports only when asked for (HEAVY: hundreds of MiB it does not need
for a dense model with its own FlashAttention; a run that leaves out flashinfer sets VLLM_USE_FLASHINFER_SAMPLER=0).
FIXES are what run 29 found missing or mismatched on the card. vLLM's wheel (~300 MiB) then travels in pieces.

    python3 -m benchmarks.gpu_vllm_wheels --vllm 0.26.0 --dest .whl      # then split vLLM's wheel into .gpu/
"""

from __future__ import annotations

import argparse
import subprocess
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

IMAGE = Path(__file__).with_name("device_image_packages.txt")
HEAVY = {"pynvvideocodec", "tilelang", "z3-solver", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base",
         "nvidia-cutlass-dsl-libs-cu12", "nvidia-cutlass-dsl-libs-core", "tokenspeed-triton", "tokenspeed-mla",
         "torchcodec", "flashinfer-python", "nvidia-cudnn-frontend", "nvidia-cuda-nvdisasm", "cuda-tile",
         "quack-kernels", "humming-kernels", "cuda-python", "pyelftools"}
# Run 29 on the card: mistral_common's pydantic-extra-types imports pycountry; xgrammar 0.2.8, which vLLM imports at
# engine start, needs a newer apache-tvm-ffi than the 0.1.10 vLLM 0.26 pins.
FIXES = ["pycountry", "apache-tvm-ffi>=0.1.15"]
MARKERS = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix", "extra": "",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
PLATFORMS = ["manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64",
             "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "linux_x86_64", "any"]


def download(requirement: Requirement, dest: Path) -> Path:
    """The one wheel of `requirement` for the device, fetched into `dest`."""
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(["python3", "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
                    "3.12", "--implementation", "cp", *platforms, "-d", str(dest),
                    f"{requirement.name}{requirement.specifier}"], check=True, capture_output=True)
    name = canonicalize_name(requirement.name)
    return next(w for w in dest.glob("*.whl") if canonicalize_name(w.name.split("-")[0]) == name)


def requirements_of(wheel: Path) -> list[Requirement]:
    """The wheel's Requires-Dist lines that apply on the device."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    found = [Requirement(line.split(":", 1)[1].strip()) for line in lines if line.startswith("Requires-Dist:")]
    return [r for r in found if r.marker is None or r.marker.evaluate(MARKERS)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", default="0.26.0", help="the vLLM release (its torch pin must be the image's)")
    parser.add_argument("--dest", default=".whl")
    args = parser.parse_args(argv)
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    image = {canonicalize_name(line) for line in IMAGE.read_text().split() if not line.startswith("#")}
    fixes = [Requirement(f) for f in FIXES]
    pinned = {canonicalize_name(r.name): r for r in fixes}  # a fix overrides what a package asks for
    queue, seen = [Requirement(f"vllm=={args.vllm}"), *fixes], set()
    while queue:
        requirement = queue.pop(0)
        name = canonicalize_name(requirement.name)
        if name in seen or name in image or name in HEAVY:
            continue
        seen.add(name)
        wheel = download(pinned.get(name, requirement), dest)
        queue.extend(requirements_of(wheel))
        print(f"{wheel.name}  {wheel.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
