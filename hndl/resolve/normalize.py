"""Argument normalization (§5 step 2): policy requirements, then defaults, then validation.

Each argument leaves with a recorded origin: ``explicit``, ``policy``, ``default``, or (later,
from the solver) ``inferred``. A policy requirement never competes with inference: it fills
an omitted field or must agree with the explicit one.
"""

from __future__ import annotations

from typing import Any, Optional

from ..errors import HNDLError
from ..graph import Node
from ..plan_values import exact_key
from ..suggestions import did_you_mean


def normalize_node(node: Node) -> tuple[dict[str, Any], dict[str, str], Optional[str]]:
    """Return (args, origins, policy identity) for one node; inferable gaps stay absent.

    Normalization depends only on the declaration, the policy and the explicit values, so nodes
    that repeat one call (a chain of ``linear(16)``) share one computation; each gets fresh dicts.
    """
    key = _cache_key(node)
    cached = _NORMALIZED.get(key) if key is not None else None
    if cached is None:
        cached = _normalize_node(node)
        if key is not None and len(_NORMALIZED) < MAX_CACHED:
            _NORMALIZED[key] = cached
    args, origins, policy_identity = cached
    return dict(args), dict(origins), policy_identity


#: Normalized (args, origins, policy identity) by (declaration, policy, explicit values).
_NORMALIZED: dict = {}
MAX_CACHED = 4096


def _cache_key(node: Node) -> Optional[tuple]:
    """The values' exact key (see ``exact_key``) with the declaration and policy; None for values
    that have none."""
    values = exact_key(node.args)
    return None if values is None else (node.spec, node.policy, values)


def _normalize_node(node: Node) -> tuple[dict[str, Any], dict[str, str], Optional[str]]:
    spec = node.spec
    args: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, value in node.args.items():
        if name not in spec.args:
            raise HNDLError(
                "E_ARGUMENT",
                f"{spec.alias} has no argument {name!r}",
                **node.where(),
                field=name,
                remedies=tuple(filter(None, (did_you_mean(name, spec.args),
                                             f"Use one of: {', '.join(spec.args) or 'no arguments'}."))),
            )
        args[name] = _normalize(node, name, value)
        origins[name] = "explicit"
    policy_identity = None
    if node.policy is not None:
        try:
            policy = spec.policy(node.policy)
        except HNDLError as error:
            raise error.located(**node.where(), field="policy") from None
        policy_identity = policy.identity
        for name, required in policy.requires.items():
            if name in args and args[name] != required:
                raise HNDLError(
                    "E_POLICY_CONFLICT",
                    f"{name}={args[name]!r} conflicts with policy {node.policy!r} "
                    f"({policy.identity}), which requires {name}={required!r}",
                    **node.where(),
                    field=name,
                    remedies=(f"Remove {name}= and let the policy supply it, or drop policy={node.policy!r}.",),
                )
            if name not in args:
                args[name] = _normalize(node, name, required)
                origins[name] = "policy"
    for name, arg in spec.args.items():
        if name in args:
            continue
        if arg.required:
            raise HNDLError(
                "E_ARGUMENT",
                f"{spec.alias} requires argument {name!r}",
                **node.where(),
                field=name,
                remedies=(f"Pass {name}= explicitly" + (", or select a policy that supplies it." if spec.policies else "."),),
            )
        if not arg.inferable:
            args[name] = arg.default
            origins[name] = "default"
    if spec.validate is not None:
        try:
            spec.validate(dict(args))
        except HNDLError as error:
            raise error.located(**node.where()) from None
    return args, origins, policy_identity


def _normalize(node: Node, name: str, value: Any) -> Any:
    """The declared per-argument validation, failing at the node's source location."""
    try:
        return node.spec.args[name].normalize(value, name=name, node=node.id)
    except HNDLError as error:
        raise error.located(**node.where(), field=name) from None
