"""What a user installs: the README's commands, the wheel's contents, the import rules."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    return [line for block in blocks[:2] for line in block.strip().splitlines()]


def test_ci_runs_exactly_the_readme_commands():
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith(("#", "set ", "cd "))]
    assert ci_lines == readme_commands()
    assert "pip install torch==2.13.0" in ci_lines[0]  # the CPU wheel on disk, not the CUDA build


def test_the_readme_links_to_every_page_of_the_docs():
    """The README is the front page on GitHub: its links land on files, and every page of docs/ is reachable."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = {link for link in links if "://" not in link}
    assert not [link for link in local if not (ROOT / link).exists()]
    pages = {page.relative_to(ROOT).as_posix() for page in (ROOT / "docs").rglob("*.md")}
    assert pages - {"docs/index.md"} <= local, pages - local


def test_wheel_ships_the_themes(tmp_path):
    pytest.importorskip("hatchling")
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("bertscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    themes = {Path(name).name for name in names if name.startswith("bertscope/themes/")}
    assert {"dark.toml", "light.toml", "colorblind.toml"} <= themes
    assert "bertscope/model/session.py" in names
    assert "bertscope/ui/explorer.tcss" in names  # the explorer's layout ships too
    assert not any(name.startswith("tests/") for name in names)


def modules_after_import(*modules: str) -> set[str]:
    code = "".join(f"import {module}\n" for module in modules) + "import sys; print(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_core_does_not_import_the_ui():
    loaded = modules_after_import("bertscope.model.session", "bertscope.model.loading")
    assert "torch" in loaded
    assert not {"textual", "bertscope.ui", "bertscope.cli", "bertscope.render"} & loaded


def test_plain_core_modules_stay_light():
    """The UI may use masks, results, errors and the values a run takes (conditions, job options) without pulling torch in."""
    loaded = modules_after_import(
        "bertscope.model.masks",
        "bertscope.model.results",
        "bertscope.base.errors",
        "bertscope.data.files",
        "bertscope.analyses.conditions",
    )
    assert "torch" not in loaded and "transformers" not in loaded
