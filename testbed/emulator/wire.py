"""The JSON the emulator reads and writes."""

from __future__ import annotations

from typing import Any

# A JSON object as a request (or a control API call) carries it: raw JSON,
# whose values are checked where they are read.
JsonObject = dict[str, Any]
# An answer the emulator builds, written as it is by json.dumps.
Answer = dict[str, object]


def page(request: JsonObject, key: str, rows: list[Any], max_results: int) -> Answer:
    """One page of ``rows`` under ``key``: from the request's NextToken (an
    offset: the bed's tokens are), at most ``max_results``, with the next
    token while rows remain, as SSM's List and Describe calls page."""
    start = int(request.get("NextToken") or 0)
    result: Answer = {key: rows[start : start + max_results]}
    if start + max_results < len(rows):
        result["NextToken"] = str(start + max_results)
    return result
