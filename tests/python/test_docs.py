"""The documentation holds together: every relative link of README.md, the
book under docs/ and the top-level Markdown files resolves to a file in the
tree (and its `#anchor` to a heading of that file), the book's SUMMARY.md
lists every page of the book, README.md stays a page a newcomer reads in a
few minutes (at most 10 KiB), ARCHITECTURE.md stays a map read in one
sitting (at most 35 KiB; its layers of defence name every layer the
threat model details), and no document or code comment points at
the project's history (the word "issue" and a number) instead of saying
what holds.

Nothing here starts a server: the checks read the tree as a reader (or
mdBook, or a repository's web view) would follow it."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "docs"
README_LIMIT = 10 * 1024
ARCHITECTURE_LIMIT = 35 * 1024

# The Markdown a reader follows: the top-level documents, the book's pages
# and the READMEs of the parts the book links into.
DOCUMENTS = sorted(
    [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "BENCHMARKS.md"]
    + list(BOOK.rglob("*.md"))
    + [ROOT / "deploy" / "kubernetes" / "README.md"]
    + list((ROOT / "packages").glob("*/README.md"))
)

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target), a title after the target allowed.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str):
    """The lines of a Markdown text outside fenced code blocks, with inline
    code spans blanked (a link spelled in code is not a link)."""
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield number, INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)


def links(path: Path):
    """(line, target) of every link and image in a Markdown file."""
    for number, line in prose_lines(path.read_text()):
        for match in INLINE_LINK.finditer(line):
            yield number, match.group(1)
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            yield number, definition.group(1)


def anchor(title: str) -> str:
    """A heading's anchor as GitHub (and mdBook) make it: links and
    emphasis reduced to their text, lower case, punctuation dropped, spaces
    as hyphens."""
    title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)
    title = title.lower()
    title = re.sub(r"[^\w\- ]", "", title)
    return title.replace(" ", "-")


def anchors(path: Path) -> set:
    """Every anchor a Markdown file's headings give (a repeated heading's
    with -1, -2, ... as GitHub numbers them)."""
    seen: dict = {}
    found = set()
    inside = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        heading = None if inside else HEADING.match(line)
        if heading:
            base = anchor(heading.group(2).replace("`", ""))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def is_external(target: str) -> bool:
    return re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) is not None


def broken_links(documents, root=ROOT):
    broken = []
    for document in documents:
        for number, target in links(document):
            if is_external(target):
                continue
            path_part, _, fragment = target.partition("#")
            where = f"{document.relative_to(root)}:{number}: {target}"
            resolved = (document.parent / path_part).resolve() if path_part else document
            if path_part and not resolved.exists():
                broken.append(f"{where} (no such file)")
                continue
            if fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                broken.append(f"{where} (no heading #{fragment} in {resolved.relative_to(root)})")
    return broken


def test_every_relative_link_resolves_to_a_file_and_heading():
    assert DOCUMENTS, "no Markdown found"
    assert broken_links(DOCUMENTS) == []


def test_the_link_check_sees_a_broken_link_and_a_broken_anchor(tmp_path):
    # The check itself: a page with a good link, a missing file, a missing
    # heading, and links that only look like links (in code) or go outside.
    (tmp_path / "other.md").write_text("# A `code` heading (with parens)\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[good](other.md#a-code-heading-with-parens) [second](other.md#twice-1) [self](#page)\n"
        "[missing](nowhere.md) [no anchor](other.md#nothing) ![gone](img/none.png)\n"
        "`[in code](nowhere.md)` [web](https://example.com/x.md)\n\n"
        "```\n[fenced](nowhere.md)\n```\n"
    )
    assert broken_links([page], root=tmp_path) == [
        "page.md:4: nowhere.md (no such file)",
        "page.md:4: other.md#nothing (no heading #nothing in other.md)",
        "page.md:4: img/none.png (no such file)",
    ]


def test_summary_lists_every_page_of_the_book():
    summary = BOOK / "SUMMARY.md"
    listed = {(summary.parent / target.partition("#")[0]).resolve()
              for _, target in links(summary) if not is_external(target)}
    pages = {page.resolve() for page in BOOK.rglob("*.md") if page != summary}
    assert sorted(str(p.relative_to(ROOT)) for p in pages - listed) == []


def test_readme_stays_within_ten_kib():
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_LIMIT, f"README.md is {size} bytes; the limit is {README_LIMIT}"


def test_architecture_stays_within_thirty_five_kib():
    size = (ROOT / "ARCHITECTURE.md").stat().st_size
    assert size <= ARCHITECTURE_LIMIT, (
        f"ARCHITECTURE.md is {size} bytes; the limit is {ARCHITECTURE_LIMIT}: "
        "move detail into the book's developer or security pages")


def section(path: Path, title: str) -> str:
    """The text under a `## title` heading of a Markdown file, up to the
    next heading of that level or higher."""
    lines = path.read_text().splitlines()
    start = lines.index(f"## {title}") + 1
    end = next((i for i in range(start, len(lines)) if re.match(r"^#{1,2} ", lines[i])), len(lines))
    return "\n".join(lines[start:end])


BOLD_LAYER = re.compile(r"^\s*\d+\.\s+\*\*(.+?)\*\*", re.M)


def test_architecture_names_every_layer_of_defence_the_threat_model_details():
    # The summary and the detail list the same layers, in the same order,
    # the stream budgets and the replica/node boundary among them.
    summary = section(ROOT / "ARCHITECTURE.md", "Layers of defence")
    detail = section(BOOK / "security" / "threat-model.md", "Layers of defence")
    assert BOLD_LAYER.findall(summary) == BOLD_LAYER.findall(detail)
    assert "The replica/node boundary." in BOLD_LAYER.findall(summary)
    assert "**Stream budgets**" in summary and "**Stream budgets.**" in detail


# Where history would be told instead of what holds: the documents, and
# the code's comments and tests.
HISTORY_PLACES = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "Cargo.toml", "docs", "crates",
                  "scripts", "tests", "bench", "deploy", "packages", "fuzz", ".ci"]
HISTORY = re.compile(r"\bissues? #?\d+", re.I)
# What is installed or generated there, not written: dependencies, build
# output, fuzzing's corpora.
SKIPPED_DIRS = {"node_modules", "target", "corpus", "artifacts", "__pycache__"}
TEXT_SUFFIXES = {".md", ".rs", ".py", ".sh", ".mjs", ".js", ".toml", ".yaml", ".yml", ".example",
                 ".txt", ".json", ".css", ".html", ""}


def test_no_document_or_comment_points_at_an_issue_number():
    found = []
    for place in HISTORY_PLACES:
        root = ROOT / place
        files = [root] if root.is_file() else root.rglob("*")
        for path in files:
            if (not path.is_file() or path.suffix not in TEXT_SUFFIXES
                    or SKIPPED_DIRS.intersection(path.parts) or path.name == "package-lock.json"):
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if HISTORY.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
