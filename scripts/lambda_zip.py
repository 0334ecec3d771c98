#!/usr/bin/env python3
"""A Lambda function zip for `provided.al2023`: one file, `bootstrap`,
executable (0755 in the zip's Unix attributes, which Lambda keeps), with a
fixed date so the same binary always makes the same zip.

    python3 scripts/lambda_zip.py BINARY OUT.zip
"""

import sys
import zipfile

# 1980-01-01, zip's epoch: no build time in the archive.
EPOCH = (1980, 1, 1, 0, 0, 0)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary, out = sys.argv[1:]
    info = zipfile.ZipInfo("bootstrap", date_time=EPOCH)
    info.external_attr = (0o100755 & 0xFFFF) << 16
    info.create_system = 3  # Unix, so the mode is read
    info.compress_type = zipfile.ZIP_DEFLATED
    with open(binary, "rb") as f, zipfile.ZipFile(out, "w") as z:
        z.writestr(info, f.read(), compresslevel=9)
    return 0


if __name__ == "__main__":
    sys.exit(main())
