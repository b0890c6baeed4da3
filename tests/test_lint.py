"""The tree stays within the lint settings in ruff.toml (pyflakes, syntax, 120 columns), and every link in
the docs to a section names a heading that exists."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install ruff; setup.sh installs it with the test extra)")
    out = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _slug(heading: str, seen: dict) -> str:
    """GitHub's anchor for a markdown heading: lower case, punctuation dropped, spaces as hyphens,
    ``-1``, ``-2`` ... on repeats."""
    base = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


def broken_anchors(files) -> list[str]:
    """``file: link`` for each relative ``[..](other.md#anchor)`` or ``[..](#anchor)`` in ``files``
    whose target file exists but holds no heading with that anchor."""
    anchors: dict[Path, set] = {}

    def of(path: Path) -> set:
        if path not in anchors:
            seen: dict = {}
            text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)  # no headings in code blocks
            anchors[path] = {_slug(h, seen) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}
        return anchors[path]

    bad = []
    for f in files:
        for link, target, anchor in re.findall(r"\]\((([^()\s#]*\.md)?#([^()\s]+))\)", f.read_text()):
            path = (f.parent / target).resolve() if target else f
            if path.is_file() and anchor not in of(path):
                bad.append(f"{f.name}: {link}")
    return bad


def test_every_docs_link_to_a_section_names_a_heading(tmp_path):
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert broken_anchors(files) == []
    page = tmp_path / "page.md"
    page.write_text("# Runs (2026-12-06 14:23-15:16 UTC)\n\n## Runs (2026-12-06 14:23-15:16 UTC)\n\n"
                    "[a](#runs-2026-12-06-1423-1516-utc) [b](#runs-2026-12-06-1423-1516-utc-1) [c](page.md#runs)\n")
    assert broken_anchors([page]) == ["page.md: page.md#runs"]
