"""Saved plans (§10, §12): canonical JSON with two digests, and validated restoration.

The public home of the plan format. The encoding lives in ``plan_encoding`` and restoration
in ``plan_restoration``, both below the plan types so ``ResolvedPlan``'s own methods can use
them; this module restates their surface and restores into ``ResolvedPlan``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .plan import PlanNode, ResolvedPlan
from .plan_encoding import (  # noqa: F401  (the format's public surface, restated)
    DIGEST,
    DIGESTS_BYTES,
    MAX_PLAN_BYTES,
    MAX_PLAN_DEPTH,
    NODE_FIELDS,
    NODE_OVERHEAD,
    OPTIONAL_PLAN_FIELDS,
    ORIGINS,
    PLAN_FIELDS,
    PLAN_FILE_REMEDY,
    SEMANTIC_NODE_FIELDS,
    SOURCE_FIELDS,
    canonical,
    digest_of,
    fields_body,
    plan_record,
    require_savable,
    semantic_digest,
    semantic_record,
    sha256_of,
    to_json,
    with_digests,
)
from .plan_restoration import read_plan_file  # noqa: F401  (restated)
from .plan_restoration import restore

def from_json(text: Any, *, registry=None, limits: Optional[Mapping[str, int]] = None) -> ResolvedPlan:
    """Restore a saved plan, checking format, versions, digests and every concrete equation."""
    return restore(text, plan_type=ResolvedPlan, node_type=PlanNode, registry=registry, limits=limits)
