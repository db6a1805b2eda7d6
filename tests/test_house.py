"""The house rules a reader relies on: every link in the README and docs/ resolves, the README
stays a front door, code cites documents inside the repository, the command line lives in
its package, and no function is too long to read at once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "slidingserve"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 400
FUNCTION_MAX_LINES = 60
FENCE = "```"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def heading_anchor(title: str) -> str:
    """The anchor GitHub gives a heading: code and link text kept, lower case, spaces to
    hyphens, every other character but letters, digits, '-' and '_' dropped."""
    title = re.sub(r"`([^`]*)`", r"\1", title)
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
    kept = (c for c in title.strip().lower() if c.isalnum() or c in " -_")
    return "".join("-" if c == " " else c for c in kept)


def prose_lines(path: Path) -> list[str]:
    """The lines of a Markdown file outside fenced code blocks."""
    lines, in_code = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(FENCE):
            in_code = not in_code
        elif not in_code:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; a repeated heading gets -1, -2, …"""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path):
        match = HEADING.match(line)
        if match:
            base = heading_anchor(match.group(2))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return found


def relative_links(path: Path) -> list[str]:
    text = "\n".join(re.sub(r"`[^`]*`", "", line) for line in prose_lines(path))
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z]+://|^mailto:", t)]


class TestHeadingAnchor:
    @pytest.mark.parametrize(
        ("title", "anchor"),
        [
            ("8. scorpio: SCORPIO", "8-scorpio-scorpio"),
            ("4. sarathi-edf*: the best fixed chunk", "4-sarathi-edf-the-best-fixed-chunk"),
            ("The `slidingserve` design (why)", "the-slidingserve-design-why"),
        ],
    )
    def test_as_github_renders_it(self, title: str, anchor: str) -> None:
        assert heading_anchor(title) == anchor

    def test_a_repeated_heading_is_numbered(self, tmp_path: Path) -> None:
        page = tmp_path / "page.md"
        page.write_text("# A\n## Notes\n```\n# not a heading\n```\n## Notes\n")
        assert anchors(page) == {"a", "notes", "notes-1"}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(document: Path) -> None:
    broken = []
    for target in relative_links(document):
        file, _, anchor = target.partition("#")
        destination = (document.parent / file).resolve() if file else document
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (destination.suffix != ".md" or anchor not in anchors(destination)):
            broken.append(f"{target}: no such heading")
    assert not broken, broken


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines < README_MAX_LINES


def test_code_cites_documents_inside_the_repository() -> None:
    citing = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "SPEC §" in line or "SPEC section" in line
    ]
    assert not citing, citing


def test_the_command_line_is_one_package() -> None:
    assert not sorted(p.name for p in PACKAGE.glob("cli*.py"))
    assert (PACKAGE / "cli" / "__init__.py").is_file()


def test_no_function_is_too_long_to_read_at_once() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_MAX_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.name} ({length} lines)")
    assert not long, long
