"""``--span-column ROLE=HEADER`` items (``hrl-policy graph``, ``hrl-policy app build``) → a column mapping."""

from __future__ import annotations

from policy.topology.spans import SPAN_ROLES

__all__ = ["parse_span_columns"]


def parse_span_columns(items: list[str]) -> dict[str, str]:
    """``["trace_id=traceId", ...]`` → ``{"trace_id": "traceId"}``; ``ValueError`` (exit 2) naming a malformed item
    or an unknown role."""
    out = {}
    for item in items:
        role, sep, header = item.partition("=")
        if not sep or not role.strip() or not header.strip():
            raise ValueError(f"--span-column: expected ROLE=HEADER, got {item!r}")
        if role.strip() not in SPAN_ROLES:
            raise ValueError(f"--span-column: unknown role {role.strip()!r}; expected one of {', '.join(SPAN_ROLES)}")
        out[role.strip()] = header.strip()
    return out
