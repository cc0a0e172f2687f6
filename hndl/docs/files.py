"""Catalog pages on disk: what is stale under a directory, and writing them (only what changed)."""

from __future__ import annotations

from pathlib import Path


def stale_pages(pages: dict[str, str], output: Path) -> list[str]:
    """Paths under ``output`` that differ from ``pages``: changed, missing, or no longer generated."""
    problems = []
    for path, text in pages.items():
        target = output / path
        if not target.is_file():
            problems.append(f"missing {target}")
        elif target.read_text(encoding="utf-8") != text:
            problems.append(f"stale {target}")
    if output.is_dir():
        for target in sorted(output.rglob("*.md")):
            if target.relative_to(output).as_posix() not in pages:
                problems.append(f"no longer generated {target}")
    return problems


def write_pages(pages: dict[str, str], output: Path) -> None:
    """Write every page and remove pages that are no longer generated."""
    if output.is_dir():
        for target in output.rglob("*.md"):
            if target.relative_to(output).as_posix() not in pages:
                target.unlink()
    for path, text in pages.items():
        target = output / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
