"""What the GPU run takes along, call by call: plan, write, stash on the machine, join, check.

The device machine has no network. Each call sends the repository's working tree (tracked and
untracked-not-ignored files) plus the folders named in ``carry``, 64 MiB in all. The payload (the
SmolLM2 GGUF, the wheels of packages the machine lacks in the needed version, the prompt token-id
file) is larger than one call, so it is spread over several: whole files where they fit, the GGUF
split into parts. Each call's command first stashes its part of the payload in a state folder on
the machine (``/tmp/specdec-gpu`` by default), which outlives the call while the machine stays up
(about 30 s between calls); the call that completes the GGUF joins it and checks its sha256.

Roles: ``model`` (split across calls; it may travel compressed, ``.xz``, with the file it unpacks to
named in the lock's ``unpacked`` entry, checked after unpacking), ``wheel`` (installed with pip
``--target`` on the machine), ``site`` (a ``.site.tar.xz`` of an installed package tree, made by
``trim_site.py``, extracted beside the wheels) and ``data``.

Only the standard library: it runs on the machine before any wheel is installed.

    python scripts/gpu/carry.py plan  [--lock scripts/gpu/payload.json] [--max-calls 2]
    python scripts/gpu/carry.py write --lock ... --files DIR --out .gpu-carry [--max-calls N]
    python scripts/gpu/carry.py stash --call .gpu-carry/call1 --state /tmp/specdec-gpu
    python scripts/gpu/carry.py join  --state /tmp/specdec-gpu
    python scripts/gpu/carry.py check [--carry .gpu-carry]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1 << 20
LIMIT = 64 * MiB  # the working tree plus carried folders, per call (device README)
MARGIN = 1 * MiB  # room for the tree to grow between prepare and the calls (a results commit, a log)
ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "scripts" / "gpu" / "payload.json"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of what every call sends: tracked and untracked-not-ignored files (and ``shared/``)."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
                         capture_output=True, check=True).stdout
    total = 0
    for name in out.split(b"\0"):
        p = root / os.fsdecode(name)
        if name and p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    shared = root / "shared"
    if shared.is_dir():
        total += sum(p.stat().st_size for p in shared.rglob("*") if p.is_file())
    return total


ROLES = ("model", "wheel", "site", "data")


@dataclass
class Item:
    """One payload file: ``role`` is one of :data:`ROLES` (``model`` is split when needed);
    ``unpacked`` (``{"name", "bytes", "sha256"}``), for an ``.xz`` file, what it decompresses to."""

    name: str
    role: str
    bytes: int
    sha256: str
    unpacked: dict | None = None

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"payload item {self.name}: role {self.role!r} is not one of {ROLES}")
        if self.unpacked is not None and not self.name.endswith(".xz"):
            raise ValueError(f"payload item {self.name}: 'unpacked' is for .xz files")


@dataclass
class Piece:
    name: str  # the file name in the call's folder
    item: str  # the payload item it is (part of)
    role: str
    offset: int
    bytes: int


@dataclass
class Plan:
    tree: int
    limit: int
    margin: int
    calls: list[list[Piece]] = field(default_factory=list)

    @property
    def room(self) -> int:
        return self.limit - self.tree - self.margin

    def call_bytes(self, k: int) -> int:
        return self.tree + sum(p.bytes for p in self.calls[k])

    def describe(self, items: list[Item]) -> str:
        lines = [f"working tree {self.tree / MiB:.2f} MiB travels with every call; limit {self.limit / MiB:.0f} MiB "
                 f"(margin {self.margin / MiB:.0f} MiB): {self.room / MiB:.2f} MiB of payload per call",
                 f"payload {sum(i.bytes for i in items) / MiB:.2f} MiB: " +
                 ", ".join(f"{i.name} {i.bytes / MiB:.2f} MiB" for i in items)]
        for k, pieces in enumerate(self.calls, start=1):
            lines.append(f"call {k}: {self.call_bytes(k - 1) / MiB:.2f} MiB = tree + " +
                         ", ".join(f"{p.name} {p.bytes / MiB:.2f}" for p in pieces))
        return "\n".join(lines)


def make_plan(items: list[Item], tree: int, *, limit: int = LIMIT, margin: int = MARGIN) -> Plan:
    """Wheels and data first (whole files, first call with room), then the model in parts filling
    what is left call by call. Raises ValueError when a whole file cannot fit any call."""
    plan = Plan(tree, limit, margin)
    if plan.room <= 0:
        raise ValueError(f"the working tree alone ({tree / MiB:.2f} MiB) leaves no room under {limit / MiB:.0f} MiB")
    free: list[int] = []
    whole = [i for i in items if i.role != "model"]  # wheels, site trees, data
    for it in sorted(whole, key=lambda i: -i.bytes):
        if it.bytes > plan.room:
            raise ValueError(f"{it.name} ({it.bytes / MiB:.2f} MiB) cannot fit one call ({plan.room / MiB:.2f} MiB)")
        k = next((k for k, f in enumerate(free) if f >= it.bytes), None)
        if k is None:
            plan.calls.append([])
            free.append(plan.room)
            k = len(free) - 1
        plan.calls[k].append(Piece(it.name, it.name, it.role, 0, it.bytes))
        free[k] -= it.bytes
    for it in (i for i in items if i.role == "model"):
        offset, part, k = 0, 0, 0
        while offset < it.bytes:
            if k == len(free):
                plan.calls.append([])
                free.append(plan.room)
            n = min(free[k], it.bytes - offset)
            if n > 0:
                plan.calls[k].append(Piece(f"{it.name}.part{part:02d}", it.name, "model", offset, n))
                free[k] -= n
                offset += n
                part += 1
            k += 1
    return plan


def read_lock(path: Path = LOCK) -> dict:
    with open(path) as f:
        return json.load(f)


def lock_items(lock: dict) -> list[Item]:
    return [Item(e["name"], e["role"], int(e["bytes"]), e["sha256"], e.get("unpacked")) for e in lock["items"]]


def unpack_xz(src: Path, dest: Path, expect: dict) -> Path:
    """Decompress ``src`` into ``dest`` and check it against ``expect`` (``bytes``, ``sha256``)."""
    import lzma

    with lzma.open(src, "rb") as f, open(dest, "wb") as out:
        shutil.copyfileobj(f, out, 1 << 22)
    if dest.stat().st_size != expect["bytes"] or sha256(dest) != expect["sha256"]:
        raise ValueError(f"{dest}: unpacked from {src.name}, but its size or sha256 differs from the lock's")
    return dest


def write_calls(plan: Plan, items: list[Item], files: Path, out: Path, extra: dict) -> list[Path]:
    """Materialise ``out/callK/`` (payload pieces + ``manifest.json``) from the files in ``files``."""
    by_name = {i.name: i for i in items}
    for it in items:
        p = files / it.name
        if not p.is_file() or p.stat().st_size != it.bytes or sha256(p) != it.sha256:
            raise ValueError(f"{p} is missing or differs from the lock (bytes {it.bytes}, sha256 {it.sha256[:12]})")
    if out.exists():
        shutil.rmtree(out)
    dirs = []
    for k, pieces in enumerate(plan.calls, start=1):
        d = out / f"call{k}"
        d.mkdir(parents=True)
        entries = []
        for p in pieces:
            with open(files / p.item, "rb") as src, open(d / p.name, "wb") as dst:
                src.seek(p.offset)
                dst.write(src.read(p.bytes))
            entries.append({"name": p.name, "item": p.item, "role": p.role, "offset": p.offset, "bytes": p.bytes,
                            "sha256": sha256(d / p.name)})
        manifest = {"call": k, "calls": len(plan.calls), "pieces": entries,
                    "items": [vars(by_name[n]) for n in sorted({p.item for p in pieces})],
                    "all_items": [vars(i) for i in items], "tree_bytes": plan.tree, "limit": plan.limit, **extra}
        (d / "manifest.json").write_text(json.dumps(manifest, indent=1))
        dirs.append(d)
    return dirs


def stash(call_dir: Path, state: Path) -> dict:
    """Copy one call's pieces into ``state/stash`` (sha256-checked); returns its manifest."""
    manifest = json.loads((call_dir / "manifest.json").read_text())
    dest = state / "stash"
    dest.mkdir(parents=True, exist_ok=True)
    for e in manifest["pieces"]:
        src = call_dir / e["name"]
        if not src.is_file() or src.stat().st_size != e["bytes"] or sha256(src) != e["sha256"]:
            raise ValueError(f"{src}: missing or damaged in transfer (expected {e['bytes']} bytes, sha256 "
                             f"{e['sha256'][:12]})")
        shutil.copyfile(src, dest / e["name"])
    (dest / f"call{manifest['call']}.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def join(state: Path, name: str | None = None) -> Path:
    """Join the stashed parts of the model item (all calls' manifests together), check its sha256,
    unpack it when it travelled compressed (checked again), and return the model file's path under
    ``state/model``. Names the missing parts when a call's stash is absent."""
    dest = state / "stash"
    manifests = [json.loads(p.read_text()) for p in sorted(dest.glob("call*.json"))]
    if not manifests:
        raise ValueError(f"nothing stashed in {dest}: run the earlier calls first")
    calls = manifests[0]["calls"]
    items = {i["name"]: i for i in manifests[0]["all_items"] if i["role"] == "model"}
    if name is None:
        if len(items) != 1:
            raise ValueError(f"name the model item to join, one of {sorted(items)}")
        name = next(iter(items))
    item = items[name]
    seen = {m["call"] for m in manifests}
    pieces = sorted((e for m in manifests for e in m["pieces"] if e["item"] == name), key=lambda e: e["offset"])
    covered = sum(e["bytes"] for e in pieces)
    if covered != item["bytes"]:
        missing = sorted(set(range(1, calls + 1)) - seen)
        raise ValueError(f"{name}: {covered} of {item['bytes']} bytes stashed; calls {missing} of {calls} are missing "
                         f"(the machine was given back between calls: run every call again, each within ~30 s)")
    out = state / "model" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as dst:
        for e in pieces:
            with open(dest / e["name"], "rb") as src:
                shutil.copyfileobj(src, dst)
    if sha256(out) != item["sha256"]:
        raise ValueError(f"{out}: joined file's sha256 differs from the lock's")
    if item.get("unpacked"):
        unpacked = unpack_xz(out, out.parent / item["unpacked"]["name"], item["unpacked"])
        out.unlink()
        return unpacked
    return out


def check(carry: Path, limit: int = LIMIT) -> list[str]:
    """Problems with the prepared folders: a call over the limit (tree + its folder), or pieces
    that do not match their manifest. Empty when everything fits."""
    tree = tree_bytes()
    problems = []
    for d in sorted(carry.glob("call*")):
        size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
        if tree + size > limit:
            problems.append(f"{d.name}: tree {tree / MiB:.2f} MiB + carried {size / MiB:.2f} MiB = "
                            f"{(tree + size) / MiB:.2f} MiB > {limit / MiB:.0f} MiB")
        manifest = json.loads((d / "manifest.json").read_text())
        for e in manifest["pieces"]:
            p = d / e["name"]
            if not p.is_file() or p.stat().st_size != e["bytes"]:
                problems.append(f"{p}: missing or not {e['bytes']} bytes")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan")
    p.add_argument("--lock", type=Path, default=LOCK)
    w = sub.add_parser("write")
    w.add_argument("--lock", type=Path, default=LOCK)
    w.add_argument("--files", type=Path, required=True, help="folder holding every payload file of the lock")
    w.add_argument("--out", type=Path, required=True)
    for q in (p, w):  # both split the lock over calls under the same limits
        q.add_argument("--max-calls", type=int, default=2)
        q.add_argument("--limit-bytes", type=int, default=LIMIT)
        q.add_argument("--margin-bytes", type=int, default=MARGIN)
        q.add_argument("--tree-bytes", type=int, default=None, help="instead of measuring this checkout's tree")
    s = sub.add_parser("stash")
    s.add_argument("--call", type=Path, required=True)
    s.add_argument("--state", type=Path, required=True)
    j = sub.add_parser("join")
    j.add_argument("--state", type=Path, required=True)
    c = sub.add_parser("check")
    c.add_argument("--carry", type=Path, default=ROOT / ".gpu-carry")
    args = ap.parse_args(argv)
    try:
        if args.cmd in ("plan", "write"):
            lock = read_lock(args.lock)
            items = lock_items(lock)
            tree = tree_bytes() if args.tree_bytes is None else args.tree_bytes
            plan = make_plan(items, tree, limit=args.limit_bytes, margin=args.margin_bytes)
            print(plan.describe(items))
            if len(plan.calls) > args.max_calls:
                fits = args.limit_bytes - args.margin_bytes - sum(i.bytes for i in items) / args.max_calls
                print(f"carry: the payload needs {len(plan.calls)} calls, more than --max-calls {args.max_calls}. "
                      f"Each call can carry {plan.room / MiB:.2f} MiB beside the {tree / MiB:.2f} MiB tree; "
                      f"{args.max_calls} calls fit only if the tree is at most {fits / MiB:.2f} MiB", file=sys.stderr)
                return 3
            if args.cmd == "write":
                head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
                dirs = write_calls(plan, items, args.files, args.out, {"lock": lock.get("meta", {}),
                                                                       "written_at_commit": head.stdout.strip()})
                print("wrote " + ", ".join(str(d) for d in dirs))
        elif args.cmd == "stash":
            m = stash(args.call, args.state)
            print(f"stashed call {m['call']} of {m['calls']}: {len(m['pieces'])} pieces in {args.state / 'stash'}")
        elif args.cmd == "join":
            print(join(args.state))
        else:
            problems = check(args.carry)
            print("\n".join(problems) or f"{args.carry}: every call fits")
            return 1 if problems else 0
    except ValueError as exc:
        print(f"carry {args.cmd}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
