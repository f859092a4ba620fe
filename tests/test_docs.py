"""The documentation a newcomer reads: the README stays a front door, the configuration reference is
generated from the settings model, and every link between the pages leads somewhere."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_configuration_reference_is_generated_from_the_settings():
    p = subprocess.run([sys.executable, "scripts/configuration_doc.py", "--check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    page = (ROOT / "docs" / "configuration.md").read_text()
    from bot.settings import Settings

    for section, field in Settings.model_fields.items():  # every key, under its section
        for key in field.annotation.model_fields:
            assert f"`HUGGINGGPT_{section.upper()}__{key.upper()}`" in page


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    quickstart = "\n".join(lines[lines.index("## Quickstart"):])
    assert "make demo" in quickstart and "make test" in quickstart


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file_and_heading(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)  # code is not a link
    text = re.sub(r"`[^`\n]*`", "", text)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name} links to {target}, which does not exist"
        if anchor and linked.suffix == ".md":
            slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", linked.read_text(), re.M)}
            assert anchor in slugs, f"{page.name} links to {target}: no such heading"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
