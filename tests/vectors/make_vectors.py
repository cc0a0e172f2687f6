"""Write the golden plan vectors. Run only when deliberately publishing a new format version:

    .venv/bin/python tests/vectors/make_vectors.py

Existing vectors are a compatibility promise; the tests refuse to let them change silently.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from specs import VECTORS, resolve_vector  # noqa: E402


def main() -> None:
    digests = {}
    for name in VECTORS:
        text = resolve_vector(name).to_json()
        (HERE / f"{name}.json").write_text(text, encoding="utf-8")
        digests[name] = json.loads(text)["digests"]
    (HERE / "digests.json").write_text(json.dumps(digests, indent=2, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
