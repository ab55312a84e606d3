"""The documentation describes the tree as it is, and cites nothing a reader cannot see.

* The module map of docs/modules.md names every module of ``stompmq/`` exactly once and
  no module that does not exist.  Left out on purpose, as the map says: the packages'
  ``__init__.py`` (re-exports) and the migration revisions (``migrations/versions/``, one per
  schema change).  The C extensions are modules too and are listed.
* docs/ and the README carry no machine paths, no references to a design document outside the
  repository, no issue numbers and no benchmark sittings (the history is in git); the code and
  the tests carry no design or issue references either.
* Every relative link in docs/ and the README reaches a file, and its ``#anchor`` a heading.
* docs/architecture.md stays within 700 lines and docs/benchmarks.md within 500; the index of
  docs/decisions/ lists every record in the folder.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest


def _root() -> Path:
    """The repository's root: the nearest directory above this file with a pyproject.toml."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    raise AssertionError("no pyproject.toml above tests/")


ROOT = _root()
PACKAGE = ROOT / "stompmq"
DOCS = ROOT / "docs"
MODULES = DOCS / "modules.md"
DOCUMENTS = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]

MAX_LINES = {"architecture.md": 700, "benchmarks.md": 500}

#: A line of the module map: a path relative to stompmq/, then its role.
MAP_LINE = re.compile(r"^(?P<path>[a-z0-9_/]+\.(?:py|c))\s+(?P<role>\S.*)$")

#: What a reader outside this repository cannot follow, in docs/ and the README.
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|home|Users|root|tmp)/")
OUTSIDE_DESIGN = re.compile(r"DESIGN §|\.\./shared")
ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d|\(issue\b", re.IGNORECASE)
SITTING = re.compile(r"\bsittings? \d", re.IGNORECASE)

LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.MULTILINE)


def module_map() -> list[tuple[str, str]]:
    """(path, role) for each line of the code block under "## Module map"."""
    text = MODULES.read_text(encoding="utf-8")
    _, found, rest = text.partition("\n## Module map\n")
    assert found, "docs/modules.md has no '## Module map' section"
    section = rest.split("\n## ", 1)[0]
    blocks = section.split("```")
    assert len(blocks) >= 3, "the module map is not a code block"
    entries = []
    for line in blocks[1].splitlines()[1:]:
        match = MAP_LINE.match(line)
        assert match is not None or not line.strip(), f"not a module map line: {line!r}"
        if match is not None:
            entries.append((match["path"], match["role"]))
    return entries


def package_modules() -> set[str]:
    """Every module of stompmq/ the map must name, relative to stompmq/."""
    found = set()
    for path in [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c")]:
        relative = path.relative_to(PACKAGE).as_posix()
        if path.name == "__init__.py" or relative.startswith("migrations/versions/"):
            continue
        found.add(relative)
    return found


def test_the_module_map_names_every_module_exactly_once() -> None:
    entries = module_map()
    named = Counter(path for path, _ in entries)
    assert [path for path, count in named.items() if count > 1] == []
    assert sorted(package_modules() - set(named)) == [], "modules missing from the map"
    assert sorted(set(named) - package_modules()) == [], "the map names modules that do not exist"


def test_the_module_map_gives_each_module_a_role() -> None:
    assert all(len(role.split()) >= 3 for _, role in module_map())


def _offences(text: str, patterns: list[re.Pattern[str]]) -> list[str]:
    return [
        f"line {text.count(chr(10), 0, match.start()) + 1}: {match.group(0)!r}"
        for pattern in patterns
        for match in pattern.finditer(text)
    ]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_documents_cite_nothing_outside_the_repository(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    assert _offences(text, [MACHINE_PATH, OUTSIDE_DESIGN, ISSUE_NUMBER, SITTING]) == []


def test_code_and_tests_cite_no_outside_design_and_no_issue_numbers() -> None:
    offences = []
    for path in sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c"), *(ROOT / "tests").rglob("*.py")]):
        if path.resolve() == Path(__file__).resolve():
            continue  # the patterns themselves
        for offence in _offences(path.read_text(encoding="utf-8"), [OUTSIDE_DESIGN, ISSUE_NUMBER]):
            offences.append(f"{path.relative_to(ROOT)} {offence}")
    assert offences == []


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_reach_a_file_and_a_heading(document: Path) -> None:
    broken = []
    for target in LINK.findall(document.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        name, _, anchor = target.partition("#")
        linked = (document.parent / name).resolve() if name else document
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md":
            anchors = {_anchor(h) for h in HEADING.findall(linked.read_text(encoding="utf-8"))}
            if anchor not in anchors:
                broken.append(target)
    assert broken == []


@pytest.mark.parametrize("name", sorted(MAX_LINES))
def test_the_long_documents_stay_short(name: str) -> None:
    lines = (DOCS / name).read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES[name]


def test_the_decisions_index_lists_every_record() -> None:
    folder = DOCS / "decisions"
    index = (folder / "README.md").read_text(encoding="utf-8")
    listed = {target for target in LINK.findall(index) if "/" not in target}
    records = {path.name for path in folder.glob("*.md") if path.name != "README.md"}
    assert sorted(records - listed) == []
