"""The JSON the emulator reads and writes."""

from __future__ import annotations

from typing import Any

# A JSON object as a request (or a control API call) carries it: raw JSON,
# whose values are checked where they are read.
JsonObject = dict[str, Any]
# An answer the emulator builds, written as it is by json.dumps.
Answer = dict[str, object]
