"""Exits 0 when the Python side of the test bed is installed at the pinned versions."""

import re
import sys
from importlib import metadata
from pathlib import Path

req = Path(__file__).with_name("requirements.txt").read_text()
ok = True
for line in req.splitlines():
    m = re.match(r"^([A-Za-z0-9_.-]+)(\[[^]]*\])?==([^\s#]+)", line.strip())
    if not m:
        continue
    name, _, version = m.groups()
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        print(f"{name} is not installed (need {version})", file=sys.stderr)
        ok = False
        continue
    if have != version:
        print(f"{name} {have} is installed, need {version}", file=sys.stderr)
        ok = False
try:
    import flask  # noqa: F401  (moto[server] extra)
    import flask_cors  # noqa: F401
except ImportError as e:
    print(f"moto[server] extra missing: {e}", file=sys.stderr)
    ok = False
sys.exit(0 if ok else 1)
