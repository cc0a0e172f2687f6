"""The catalog page in docs/operators is what `python -m hndl.docs` generates from the declaration.

After changing a declaration, regenerate it with
    python -m hndl.docs --packs {{ cookiecutter.pack_name }} --output docs/operators
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "hndl.docs", "--packs", "{{ cookiecutter.pack_name }}", "--output", "docs/operators"]


def test_the_operator_page_exists():
    page = ROOT / "docs" / "operators" / "{{ cookiecutter.pack_name }}" / "{{ cookiecutter.operator_alias }}.md"
    assert page.is_file(), f"missing {page}: run {' '.join(COMMAND[1:])}"
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# `{{ cookiecutter.operator_alias }}`")
    assert "`{{ cookiecutter.__identity }}@1`" in text


def test_the_catalog_is_current():
    result = subprocess.run([*COMMAND, "--check"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{result.stderr}\nregenerate with: python {' '.join(COMMAND[1:])}"
