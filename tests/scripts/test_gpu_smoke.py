"""The prepared GPU run (scripts/gpu/run.sh) cannot rot while no GPU is lent: its smoke run does every
step on the CPU at toy sizes, and what the real run takes along is checked against the 64 MiB a call."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))

import carry  # noqa: E402
import summary  # noqa: E402

SMOKE_CPU_SECONDS = 180  # the bound for the smoke run, on 2 idle cores


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def test_smoke_run_does_every_step_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    before = _children_cpu()
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu" / "run.sh"), "--smoke", "--out", str(out)],
                          cwd=ROOT, env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=1200)
    cpu = _children_cpu() - before
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    steps = {(s["call"], s["step"]): s for s in results["steps"]}
    expected = {(1, "stash"), (1, "site"), (1, "site_check"), (1, "cuda_check"), (1, "cuda_tests"), (1, "verify"),
                (2, "stash"), (2, "site_check"), (2, "model"), (2, "train"), (2, "decoder"), (1, "summary")}
    # (the last summary step writes results.json before its own record exists)
    assert expected <= set(steps), sorted(steps)
    assert all(s["rc"] == 0 for s in results["steps"]), [s for s in results["steps"] if s["rc"]]
    assert "tests collected" in results["cuda_tests"]["summary"]  # the -m cuda selection resolves
    assert len(results["verify"]["rows"]) >= 2 and results["verify"]["summary"]["worst"]
    dec = results["decoder"]
    assert not dec["errors"] and set(dec["dtypes"]) == {"bf16", "fp16"}
    for part in dec["dtypes"].values():
        assert {"plain", "suffix", "eagle3", "hybrid-eagle3"} <= set(part["equality"])
        assert all(e["equal"] == e["total"] for rows in part["equality"].values() for e in rows.values())
    assert dec["law"]["passed"] and len(dec["law"]["cases"]) == 4
    train = results["train"]
    for name in ("eagle3", "medusa"):
        assert train[name]["heldout"]["ce"][0] < train[name]["heldout_before"]["ce"][0]
    text = (out / "summary.md").read_text()
    for heading in ("## 1.", "## 2.", "## 3.", "## 4.", "Decoder law", "torch.profiler, worst case"):
        assert heading in text
    assert summary.check_out(out) == []  # <= 8 files, <= 16 MiB each, <= 2 folders deep
    assert (out / "eagle3-gpu" / "weights.safetensors").is_file() and (out / "logs.tar.gz").is_file()
    assert cpu < SMOKE_CPU_SECONDS, f"the smoke run took {cpu:.0f} s of CPU"


def test_out_folder_rule_catches_what_would_not_come_back(tmp_path):
    for i in range(9):
        (tmp_path / f"f{i}").write_text("x")
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c" / "deep").write_text("x")
    problems = summary.check_out(tmp_path)
    assert any("10 files" in p for p in problems) and any("deeper" in p for p in problems)


def _plan():
    lock = carry.read_lock()
    items = carry.lock_items(lock)
    return carry.make_plan(items, carry.tree_bytes()), items


def test_every_planned_call_fits_64_mib():
    """The lock (scripts/gpu/payload.json, written by prepare.sh) split over calls: each call's
    working tree plus its share stays within the limit, the wheels and data are whole in one call,
    and the model's parts cover it exactly once."""
    plan, items = _plan()
    assert all(plan.call_bytes(k) + plan.margin <= carry.LIMIT for k in range(len(plan.calls)))
    model = next(i for i in items if i.role == "model")
    parts = sorted((p for c in plan.calls for p in c if p.item == model.name), key=lambda p: p.offset)
    assert parts[0].offset == 0 and sum(p.bytes for p in parts) == model.bytes
    assert all(a.offset + a.bytes == b.offset for a, b in zip(parts, parts[1:]))
    wheels = [p for c in plan.calls for p in c if p.role == "wheel"]
    assert {p.item for p in wheels} == {i.name for i in items if i.role == "wheel"} and all(p.offset == 0
                                                                                             for p in wheels)


def test_the_payload_fits_two_calls():
    """The issue's budget: two calls. The tree travels with each (15.8 MiB on 2026-12-05), so the
    payload travels packed: the GGUF xz-compressed, transformers trimmed to what the run imports."""
    plan, _ = _plan()
    assert len(plan.calls) <= 2, f"{len(plan.calls)} calls"


def test_prepared_carry_folders_match_the_limit_and_their_manifests():
    folder = ROOT / ".gpu-carry"
    if not (folder / "call1" / "manifest.json").is_file():
        pytest.skip("no .gpu-carry here (scripts/gpu/prepare.sh makes it; the plan test above covers the sizes)")
    assert carry.check(folder) == []


def _xz_payload(tmp_path, unpacked_sha=None):
    """A one-item payload: a model file travelling xz-compressed, split over two calls and stashed."""
    import lzma

    files = tmp_path / "files"
    files.mkdir()
    plain = files / "model.bin"
    plain.write_bytes(os.urandom(3000) * 3)
    packed = files / "model.bin.xz"
    packed.write_bytes(lzma.compress(plain.read_bytes()))
    item = carry.Item(packed.name, "model", packed.stat().st_size, carry.sha256(packed),
                      {"name": plain.name, "bytes": plain.stat().st_size,
                       "sha256": unpacked_sha or carry.sha256(plain)})
    plan = carry.make_plan([item], 0, limit=item.bytes // 2 + 1, margin=0)
    assert len(plan.calls) == 2
    state = tmp_path / "state"
    for d in carry.write_calls(plan, [item], files, tmp_path / "carry", {}):
        carry.stash(d, state)
    return state, plain


def test_a_packed_model_is_joined_unpacked_and_checked(tmp_path):
    state, plain = _xz_payload(tmp_path)
    out = carry.join(state)
    assert out.name == "model.bin" and out.read_bytes() == plain.read_bytes()
    assert not (out.parent / "model.bin.xz").exists()  # the packed copy does not stay beside it


def test_a_model_that_unpacks_to_other_bytes_is_refused(tmp_path):
    state, _ = _xz_payload(tmp_path, unpacked_sha="0" * 64)
    with pytest.raises(ValueError, match="unpacked from model.bin.xz, but its size or sha256 differs"):
        carry.join(state)


def test_an_unknown_role_or_a_misplaced_unpacked_entry_is_refused():
    with pytest.raises(ValueError, match="role 'wheels' is not one of"):
        carry.Item("a.whl", "wheels", 1, "0")
    with pytest.raises(ValueError, match="'unpacked' is for .xz files"):
        carry.Item("m.gguf", "model", 1, "0", {"name": "m", "bytes": 1, "sha256": "0"})


def test_trim_site_keeps_the_named_model_folders_and_the_metadata(tmp_path):
    import tarfile
    import zipfile

    import trim_site

    wheel = tmp_path / "transformers-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in ("transformers/__init__.py", "transformers/models/__init__.py",
                     "transformers/models/auto/configuration_auto.py", "transformers/models/llama/modeling_llama.py",
                     "transformers/models/bert/modeling_bert.py", "transformers-9.9.9.dist-info/METADATA"):
            z.writestr(name, "x = 1\n")
    out = tmp_path / "transformers-9.9.9.site.tar.xz"
    assert trim_site.trim(wheel, out, {"auto", "llama"}) == (5, 1)
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
    assert "transformers/models/bert/modeling_bert.py" not in names
    assert {"transformers/models/__init__.py", "transformers/models/llama/modeling_llama.py",
            "transformers-9.9.9.dist-info/METADATA"} <= names
    with pytest.raises(ValueError, match=r"no transformers/models/ folder for \['qwen3'\]"):
        trim_site.trim(wheel, out, {"llama", "qwen3"})


def test_trim_site_refuses_an_output_run_sh_would_not_extract(tmp_path, capsys):
    import trim_site

    with pytest.raises(SystemExit):
        trim_site.main([str(tmp_path / "t-1-py3-none-any.whl"), "--out", str(tmp_path / "t.tar.gz")])
    assert "--out must end in .site.tar.xz" in capsys.readouterr().err
