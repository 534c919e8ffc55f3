"""The documentation in the repository says what the code does, and links only inside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from winnow.data import schema

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def table(text: str, first_header: str) -> list[list[str]]:
    """The body rows of the Markdown table whose first header cell is `first_header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def listed(text: str, label: str) -> list[str]:
    """The comma-separated words after `label` on its line ('Roles: `a`, `b`.' -> [a, b])."""
    line = next(line for line in text.splitlines() if line.startswith(label))
    body = line[len(label) :].split(":", 1)[-1]
    return [w.strip(" `.") for w in body.split(",")]


def test_taxonomy_matches_the_schema_module():
    text = (DOCS / "TAXONOMY.md").read_text()
    rows = table(text, "#")
    assert [int(r[0]) for r in rows] == list(range(1, len(rows) + 1))
    assert tuple(r[1] for r in rows) == schema.CATEGORIES, "categories or their priority order"
    assert {r[1]: r[3] for r in rows} == schema.DEFAULT_STRATEGIES
    assert set(listed(text, "Must-keep")) == schema.MUST_KEEP
    assert set(listed(text, "Droppable")) == schema.DROPPABLE
    documented = set(re.findall(r"^- ([a-z_]+): ", text, re.M))
    assert documented == set(schema.DEFAULT_STRATEGIES.values()), "every strategy explained"


def test_schema_matches_the_unit_dataclass():
    text = (DOCS / "SCHEMA.md").read_text()
    assert tuple(r[0] for r in table(text, "field")) == schema.SCHEMA_FIELDS
    assert tuple(listed(text, "Roles")) == schema.ROLES
    assert tuple(listed(text, "Kinds")) == schema.KINDS
    unit = schema.Unit("s:0", "s", 0, "user", "text", "hi")
    assert tuple(unit.to_dict()) == schema.SCHEMA_FIELDS


@pytest.mark.parametrize(
    "page",
    [
        "README.md",
        "models/winnow-small/MODEL_CARD.md",
        "docs/TAXONOMY.md",
        "docs/SCHEMA.md",
        "docs/classifier.md",
    ],
)
def test_links_resolve_inside_the_repository(page):
    path = ROOT / page
    links = re.findall(r"\]\(([^)#\s]+)[^)]*\)", path.read_text())
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    for link in local:
        target = (path.parent / link).resolve()
        assert target.is_relative_to(ROOT), f"{page} links outside the repository: {link}"
        assert target.exists(), f"{page} links to a missing file: {link}"


def test_readme_and_model_card_link_the_taxonomy_and_schema():
    for page, prefix in (
        ("README.md", "docs/"),
        ("models/winnow-small/MODEL_CARD.md", "../../docs/"),
    ):
        text = (ROOT / page).read_text()
        for doc in ("TAXONOMY.md", "SCHEMA.md"):
            assert f"]({prefix}{doc})" in text, f"{page} does not link {doc}"
