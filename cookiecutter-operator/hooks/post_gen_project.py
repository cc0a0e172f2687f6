"""Render the new operator's catalog page with HNDL's own generator, `python -m hndl.docs`.

The pack is not installed yet, and `python -m hndl.docs --packs NAME` finds packs only
through their `hndl.packs` entry point. So the hook writes the distribution metadata pip
would write for this pack (METADATA and entry_points.txt) into a temporary directory, puts
that directory and the new project on PYTHONPATH, and runs the same command an author runs
after `pip install -e .`. The pages land in docs/operators/, where the pack's
tests/test_catalog.py keeps them current with `--check`.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

PACK_NAME = {{ cookiecutter.pack_name | tojson }}
DISTRIBUTION = {{ cookiecutter.__distribution_name | tojson }}
MODULE = {{ cookiecutter.__module_name | tojson }}
VERSION = "0.1.0"


def write_metadata(directory: Path) -> None:
    info = directory / f"{MODULE}-{VERSION}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {VERSION}\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[hndl.packs]\n{PACK_NAME} = {MODULE}\n", encoding="utf-8")


def main() -> int:
    project = Path.cwd()
    command = [sys.executable, "-m", "hndl.docs", "--packs", PACK_NAME, "--output", "docs/operators"]
    with tempfile.TemporaryDirectory() as temporary:
        write_metadata(Path(temporary))
        path = [temporary, str(project)] + [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                            if entry]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONDONTWRITEBYTECODE="1")
        result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout + result.stderr, file=sys.stderr)
        print(f"ERROR: rendering the catalog page failed: {' '.join(command[1:])}", file=sys.stderr)
        return 1
    page = Path("docs", "operators", PACK_NAME, {{ cookiecutter.operator_alias | tojson }} + ".md")
    if not (project / page).is_file():
        print(f"ERROR: {' '.join(command[1:])} did not write {page}", file=sys.stderr)
        return 1
    print(f"{DISTRIBUTION}: wrote the catalog page {page.as_posix()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
