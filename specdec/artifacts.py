"""Fingerprints, manifests and compatibility checks: when a proposer artifact must be rebuilt.

Trained heads (Medusa, EAGLE) read the target's hidden states, so they are bound to one target
checkpoint; a draft model is bound to a tokenizer; a lookup proposer to nothing. An artifact is
``<dir>/weights.safetensors`` + ``<dir>/manifest.json``; loading it against anything else raises
:class:`IncompatibleArtifactError` naming both fingerprints unless explicitly overridden (which
warns). Fingerprints are short hex digests with a kind prefix (``target-``, ``tok-``, ``weights-``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Literal, Mapping, Sequence

import torch

BoundTo = Literal["nothing", "tokenizer", "target"]


@dataclass(frozen=True)
class Artifact:
    """What a proposer (``name``) is ``bound_to`` (``"nothing"``, ``"tokenizer"``, ``"target"``), the
    ``fingerprint`` of that binding (None when bound to nothing), its ``version`` (weights fingerprint
    for trained artifacts) and free-form ``details``."""

    name: str
    bound_to: BoundTo = "nothing"
    fingerprint: str | None = None
    version: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.bound_to not in ("nothing", "tokenizer", "target"):
            raise ValueError(f"Artifact.bound_to must be 'nothing', 'tokenizer' or 'target', got {self.bound_to!r}")
        if self.bound_to != "nothing" and not self.fingerprint:
            raise ValueError(f"Artifact {self.name!r} is bound to a {self.bound_to} but has no fingerprint")


MANIFEST_NAME = "manifest.json"
WEIGHTS_NAME = "weights.safetensors"
MANIFEST_FORMAT = 1
_DIGEST_CHARS = 20
# Elements hashed per tensor: enough that a retrain (which moves essentially every weight)
# changes the sample, cheap enough that a 135M-parameter model fingerprints in well under 1 s.
_SAMPLE_ELEMENTS = 4096
# Config keys that describe how a checkpoint was loaded or saved, not what it computes.
# ``quantization_config`` is among them because quantized weights already show in the tensor
# checksums (dtype, shape, bytes), and a GGUF file dequantized at load leaves it behind.
_VOLATILE_CONFIG_KEYS = frozenset(
    {"quantization_config", "_name_or_path", "transformers_version", "torch_dtype", "dtype", "_attn_implementation",
     "_attn_implementation_autoset", "_commit_hash", "use_cache", "output_hidden_states",
     "output_attentions", "return_dict", "architectures"}
)


class IncompatibleArtifactError(ValueError):
    """An artifact was loaded against a target or tokenizer other than the one it was built for."""


class DraftingOptionError(ValueError):
    """A drafting option (carried by an artifact or given) that the proposer does not take."""


def _digest(kind: str, h: "hashlib._Hash") -> str:
    return f"{kind}-{h.hexdigest()[:_DIGEST_CHARS]}"


def _canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()


def tensor_checksum(t: torch.Tensor, samples: int = _SAMPLE_ELEMENTS) -> bytes:
    """Shape, dtype, ``samples`` strided elements (catch any retrain) and an exact integer checksum
    of all elements' bits (catches a change in a few rows); one vectorised pass."""
    flat = t.detach().reshape(-1)
    n = flat.numel()
    head = f"{tuple(t.shape)}|{t.dtype}|".encode()
    if n == 0:
        return head
    stride = max(1, n // samples)
    sample = flat[::stride][:samples].contiguous().cpu()
    sample_bytes = sample.view(torch.uint8).numpy().tobytes()
    return head + sample_bytes + b"|" + _exact_moments(flat)


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _exact_moments(flat: torch.Tensor) -> bytes:
    """Wrapping int64 sum of every element's bits: exact, so independent of device and reduction
    order, and changed by any single element."""
    size = flat.element_size()
    if flat.dtype == torch.bool or size not in _INT_OF_SIZE:
        flat = flat.to(torch.int64)
        size = 8
    total = flat.contiguous().view(_INT_OF_SIZE[size]).sum(dtype=torch.int64)
    return str(int(total)).encode()


def tensors_fingerprint(named: Iterable[tuple[str, torch.Tensor]], kind: str = "weights") -> str:
    """Fingerprint of named tensors (order-independent: names are sorted)."""
    h = hashlib.sha256()
    for name, t in sorted(named, key=lambda kv: kv[0]):
        h.update(name.encode() + b"\0")
        h.update(tensor_checksum(t))
    return _digest(kind, h)


def config_dict(config: Any) -> dict[str, Any]:
    """A model config as a plain dict without load/save bookkeeping keys."""
    raw = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return {k: v for k, v in raw.items() if k not in _VOLATILE_CONFIG_KEYS}


def target_fingerprint(model: torch.nn.Module) -> str:
    """Fingerprint of a target checkpoint: config plus every parameter/buffer (tied weights once);
    changes with any weight, the architecture or the dtype."""
    h = hashlib.sha256()
    cfg = getattr(model, "config", None)
    h.update(_canonical_json(config_dict(cfg) if cfg is not None else {}))
    seen: set[int] = set()
    named = []
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        key = t.data_ptr()
        if key in seen and t.numel():
            continue
        seen.add(key)
        named.append((name, t))
    h.update(tensors_fingerprint(named, "x").encode())
    return _digest("target", h)


@dataclass(frozen=True)
class TokenizerInfo:
    """What a tokenizer fingerprint covers: ``vocab`` (token string -> id, added tokens included)
    and ``special`` (role such as ``"eos_token"`` -> token string(s))."""

    vocab: Mapping[str, int]
    special: Mapping[str, Any]

    @property
    def size(self) -> int:
        return len(self.vocab)


def tokenizer_info(tokenizer: Any) -> TokenizerInfo:
    """Normalise a Hugging Face tokenizer (or a :class:`TokenizerInfo`) into a :class:`TokenizerInfo`."""
    if isinstance(tokenizer, TokenizerInfo):
        return tokenizer
    if not hasattr(tokenizer, "get_vocab"):
        raise TypeError(
            f"expected a tokenizer with get_vocab() (Hugging Face) or a TokenizerInfo, got {type(tokenizer).__name__}"
        )
    vocab = dict(tokenizer.get_vocab())
    special = dict(getattr(tokenizer, "special_tokens_map", {}) or {})
    return TokenizerInfo(vocab=vocab, special={k: special[k] for k in sorted(special)})


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """Fingerprint of a tokenizer's vocabulary (string -> id) and special tokens."""
    info = tokenizer_info(tokenizer)
    h = hashlib.sha256()
    h.update(_canonical_json(sorted(info.vocab.items(), key=lambda kv: (kv[1], kv[0]))))
    h.update(_canonical_json(info.special))
    return _digest("tok", h)


def tokenizer_mismatch(a: Any, b: Any, *, max_listed: int = 10) -> list[str]:
    """Differences between two tokenizers (empty: identical): sizes, up to ``max_listed`` ids whose
    string differs, and every differing special-token role."""
    ia, ib = tokenizer_info(a), tokenizer_info(b)
    out: list[str] = []
    if ia.size != ib.size:
        out.append(f"vocabulary size {ia.size} != {ib.size}")
    by_id_a = {i: s for s, i in ia.vocab.items()}
    by_id_b = {i: s for s, i in ib.vocab.items()}
    diff_ids = sorted(i for i in set(by_id_a) | set(by_id_b) if by_id_a.get(i) != by_id_b.get(i))
    if diff_ids:
        shown = ", ".join(f"{i}: {by_id_a.get(i)!r} vs {by_id_b.get(i)!r}" for i in diff_ids[:max_listed])
        more = f" (+{len(diff_ids) - max_listed} more)" if len(diff_ids) > max_listed else ""
        out.append(f"{len(diff_ids)} ids map to different tokens: {shown}{more}")
    for role in sorted(set(ia.special) | set(ib.special)):
        if ia.special.get(role) != ib.special.get(role):
            out.append(f"special token {role}: {ia.special.get(role)!r} vs {ib.special.get(role)!r}")
    return out


def check_tokenizers_identical(draft_tokenizer: Any, target_tokenizer: Any) -> None:
    """Raise :class:`IncompatibleArtifactError` listing every mismatch unless identical (no re-mapping)."""
    problems = tokenizer_mismatch(draft_tokenizer, target_tokenizer)
    if problems:
        raise IncompatibleArtifactError(
            "draft tokenizer differs from the target tokenizer (draft vs target): " + "; ".join(problems)
            + ". A draft model must share the target's vocabulary exactly."
        )


@dataclass
class Manifest:
    """JSON manifest beside an artifact's weights: ``kind`` (``"medusa"``, ``"draft_model"``,
    ``"eagle"``), ``name``, ``bound_to`` (``"target"`` or ``"tokenizer"``) and its ``fingerprint``,
    ``weights_fingerprint`` (the version), ``config`` (to rebuild the module), ``training``,
    ``measured`` (dated entries appended later), ``created`` (ISO-8601 UTC)."""

    kind: str
    name: str
    bound_to: str
    fingerprint: str
    weights_fingerprint: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    measured: list[dict[str, Any]] = field(default_factory=list)
    created: str = ""
    format: int = MANIFEST_FORMAT

    def __post_init__(self):
        if self.bound_to not in ("target", "tokenizer"):
            raise ValueError(f"Manifest.bound_to must be 'target' or 'tokenizer', got {self.bound_to!r}")
        if not self.fingerprint:
            raise ValueError(f"Manifest {self.name!r} is bound to a {self.bound_to} but has no fingerprint")
        if not self.created:
            self.created = utc_now()

    def to_artifact(self) -> Artifact:
        """The proposer-facing :class:`~specdec.Artifact` view of this manifest."""
        details = {"kind": self.kind, "config": self.config, "training": self.training}
        if self.measured:
            details["last_measured"] = self.measured[-1]
        return Artifact(self.name, self.bound_to, self.fingerprint, self.weights_fingerprint, details)

    def drafting_options(self, allowed: Sequence[str], given: Mapping[str, Any]) -> dict[str, Any]:
        """``config["drafting"]`` overridden by ``given`` (``None``: not asked). Raises
        :class:`DraftingOptionError` when it is not a mapping or either names an option outside
        ``allowed`` (a carried option is never dropped silently)."""
        stored = self.config.get("drafting", {})
        if not isinstance(stored, Mapping):
            raise DraftingOptionError(f"manifest {self.name!r}: config['drafting'] must be a mapping, got {stored!r}")
        for what, options in (("the manifest carries", stored), ("were given", given)):
            unknown = sorted(set(options) - set(allowed))
            if unknown:
                raise DraftingOptionError(f"{self.kind} artifact {self.name!r}: drafting options {unknown} {what} "
                                          f"are not options of this proposer (it takes {sorted(allowed)})")
        return {**stored, **{k: v for k, v in given.items() if v is not None}}

    def last_measured(self) -> dict[str, Any] | None:
        return self.measured[-1] if self.measured else None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Manifest":
        fmt = d.get("format")
        if fmt != MANIFEST_FORMAT:
            raise ValueError(f"manifest format {fmt!r} is not supported (expected {MANIFEST_FORMAT})")
        missing = [k for k in ("kind", "name", "bound_to", "fingerprint") if k not in d]
        if missing:
            raise ValueError(f"manifest is missing required keys {missing}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"manifest has unknown keys {unknown} (expected a subset of {sorted(known)})")
        return cls(**dict(d))


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def save_artifact(directory: str, tensors: Mapping[str, torch.Tensor], manifest: Manifest) -> Manifest:
    """Write ``weights.safetensors`` and ``manifest.json`` into ``directory``, recomputing
    ``weights_fingerprint`` from ``tensors``; returns the manifest."""
    from safetensors.torch import save_file

    os.makedirs(directory, exist_ok=True)
    flat = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    manifest.weights_fingerprint = tensors_fingerprint(flat.items())
    save_file(flat, os.path.join(directory, WEIGHTS_NAME))
    write_manifest(directory, manifest)
    return manifest


def write_manifest(directory: str, manifest: Manifest) -> None:
    path = os.path.join(directory, MANIFEST_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(asdict(manifest), f, indent=2, sort_keys=True, default=str)
        f.write("\n")
    os.replace(tmp, path)


def read_manifest(directory: str) -> Manifest:
    path = os.path.join(directory, MANIFEST_NAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {MANIFEST_NAME} in {directory!r}: not a specdec artifact directory")
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}): the artifact's manifest is corrupted") from exc
    try:
        return Manifest.from_dict(data)
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"{path}: not a specdec manifest ({exc})") from exc


def load_artifact(directory: str, *, verify_weights: bool = True) -> tuple[dict[str, torch.Tensor], Manifest]:
    """Read an artifact; with ``verify_weights`` the weights must match the manifest's fingerprint."""
    from safetensors.torch import load_file

    manifest = read_manifest(directory)
    weights = os.path.join(directory, WEIGHTS_NAME)
    try:
        tensors = load_file(weights)
    except Exception as exc:  # safetensors raises its own SafetensorError, or OSError
        raise ValueError(f"{weights}: cannot read the artifact's weights ({type(exc).__name__}: {exc})") from exc
    if verify_weights:
        got = tensors_fingerprint(tensors.items())
        if got != manifest.weights_fingerprint:
            raise IncompatibleArtifactError(
                f"{directory}: weights fingerprint {got} does not match the manifest's "
                f"{manifest.weights_fingerprint} (weights edited or manifest from another run)"
            )
    return tensors, manifest


def check_compatible(manifest: Manifest, fingerprint: str, *, allow_mismatch: bool = False) -> bool:
    """True when ``manifest`` was built for ``fingerprint``; otherwise raise
    :class:`IncompatibleArtifactError` naming both, or with ``allow_mismatch`` warn (``RuntimeWarning``)
    and return False (still exact, acceptance usually collapses)."""
    expected_kind = "target-" if manifest.bound_to == "target" else "tok-"
    if not fingerprint.startswith(expected_kind):
        raise ValueError(
            f"artifact {manifest.name!r} is bound to a {manifest.bound_to}; expected a {expected_kind}... "
            f"fingerprint to check against, got {fingerprint!r}"
        )
    if manifest.fingerprint == fingerprint:
        return True
    msg = (
        f"artifact {manifest.name!r} ({manifest.kind}) was built for {manifest.bound_to} "
        f"{manifest.fingerprint}, but the loaded {manifest.bound_to} is {fingerprint}"
    )
    if manifest.bound_to == "target":
        msg += (f": trained heads must be refit after every checkpoint change (`{refit_command(manifest.kind)}`). "
                "The fingerprint covers the weights as loaded, dtype included: the same checkpoint loaded in "
                "another dtype (bfloat16 for a float32-trained artifact) also differs, so load it as the "
                "artifact was trained")
    if allow_mismatch:
        warnings.warn(msg + " (allow_mismatch=True: loading anyway)", RuntimeWarning, stacklevel=2)
        return False
    raise IncompatibleArtifactError(msg + ". Pass allow_mismatch=True (--allow-mismatch) to load it anyway.")


def refit_command(kind: str) -> str:
    """The ``specdec train`` command that rebuilds an artifact of ``kind``."""
    return {"medusa": "specdec train heads", "eagle": "specdec train eagle",
            "draft_model": "specdec train draft"}.get(kind, "specdec train heads")


def record_measurement(directory: str, **facts: Any) -> Manifest:
    """Append a measurement (``tokens_per_step=..., command=...``; a UTC ``date`` is added unless
    given) to a manifest; returns it."""
    if not facts:
        raise ValueError("record_measurement needs at least one fact (e.g. tokens_per_step=...)")
    manifest = read_manifest(directory)
    entry = {"date": utc_now(), **facts}
    manifest.measured.append(entry)
    write_manifest(directory, manifest)
    return manifest
