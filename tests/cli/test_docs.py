"""The docs site's tables come from the make targets: every ``--8<--`` include (pymdownx.snippets)
in docs/ names a file that exists, and each make target that writes a results table copies it
into docs/papers/tables, the files the results pages include (the Makefile read as text; nothing
is run)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
TABLES = "docs/papers/tables"
INCLUDE = re.compile(r'^\s*-{1,}8<-{1,}\s+"([^"]+)"', re.MULTILINE)
# make target -> the tables it writes (results/*.md, profile.md) and copies into docs/papers/tables
TABLE_TARGETS = {
    "table1": {"table1"},
    "noise-sweep": {"table1", "noise_sweep"},
    "table-ddlm": {"table_ddlm"},
    "table-ddlm-two-body": {"table_ddlm"},
    "table-chain": {"table_chain"},
    "figure5": {"profile"},
    "bench": {"profile"},
}
# targets that write their table through another target ($(MAKE) ... <target>)
VIA = {"chain-pendulum": "table-chain"}


def includes() -> list[tuple[Path, str]]:
    """(page, included path) of every snippet include in docs/."""
    return [
        (page, name)
        for page in sorted(DOCS.rglob("*.md"))
        for name in INCLUDE.findall(page.read_text(encoding="utf-8"))
    ]


def recipe(target: str) -> str:
    """The recipe of ``target`` in the Makefile: its tab-indented lines after ``target:``."""
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n|[ \t]*\n)*)", text, re.M)
    assert match, f"no target {target} in the Makefile"
    return match.group(1)


def test_every_include_names_a_file_that_exists():
    found = includes()
    assert found, "no --8<-- include in docs/"
    missing = [
        f"{page.relative_to(REPO)}: {name}" for page, name in found if not (REPO / name).is_file()
    ]
    assert not missing, missing


def test_every_table_file_is_included_by_a_page():
    included = {name for _, name in includes()}
    files = {f"{TABLES}/{p.name}" for p in (REPO / TABLES).glob("*.md")}
    assert files and files <= included, files - included


@pytest.mark.parametrize("target", sorted(TABLE_TARGETS))
def test_table_target_copies_its_table_into_the_docs(target):
    text = recipe(target)
    copied = set(re.findall(r"\$\(call docs_table,[^,]+,([^,]+),[^)]+\)", text))
    assert copied == TABLE_TARGETS[target], text
    for name in copied:
        assert (REPO / TABLES / f"{name}.md").is_file(), name
    # the copy comes after the command that writes the table
    writer = {"figure5": "hnnsym.profile", "bench": "hnnsym.profile"}.get(target, "hnnsym.table")
    assert text.index(writer) < text.index("$(call docs_table")


def test_the_copy_macro_writes_into_docs_papers_tables():
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    macro = re.search(r"^define docs_table\n(.*?)^endef", text, re.M | re.S)
    assert macro and "> $(DOCS_TABLES)/$(2).md" in macro.group(1)
    assert re.search(rf"^DOCS_TABLES \?= {re.escape(TABLES)}$", text, re.M)


@pytest.mark.parametrize("target, via", sorted(VIA.items()))
def test_targets_that_end_with_a_table_target_call_it(target, via):
    assert re.search(rf"\$\(MAKE\)[^\n]*\b{re.escape(via)}\s*$", recipe(target), re.M)
