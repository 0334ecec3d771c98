"""The nodes' host keys (one set per network index and node, made once and
copied by later beds) and the bed's client key."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

# Host keys made once and reused by later beds (node_host_keys).
KEY_POOL = Path("/tmp/hostkeyctl-bed-keys")
KEY_TYPES = ["rsa", "ecdsa", "ed25519"]


def node_host_keys(root: Path, slot: str) -> None:
    """Gives the node at `root` the host keys of `slot` (rsa, ecdsa and
    ed25519 in ``root/etc/ssh``, as ``ssh-keygen -A -f root`` writes them).

    A slot's keys are generated once, by the first bed that needs them, and
    copied by every later one: RSA key generation was a sixth of the test
    suite's CPU. The slot names the network index and the node, so the
    nodes of one bed, and of beds running at the same time, never share a
    key; a bed after another reusing a key is a node reinstalled with its
    old keys, which nothing compares.
    """
    files = [f"ssh_host_{t}_key{ext}" for t in KEY_TYPES for ext in ("", ".pub")]
    KEY_POOL.mkdir(mode=0o700, parents=True, exist_ok=True)
    pool = KEY_POOL.lstat()
    if not stat.S_ISDIR(pool.st_mode) or pool.st_uid != os.getuid() or pool.st_mode & 0o077:
        # Someone else's directory (or a symlink) at the pool's path: its
        # keys are not ours to serve. Fresh keys, as before the pool.
        print(
            f"bed: {KEY_POOL} is not a directory of uid {os.getuid()} closed to others; "
            "generating fresh host keys (remove it to reuse keys between beds)",
            file=sys.stderr,
        )
        (root / "etc" / "ssh").mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-A", "-f", str(root)], check=True, capture_output=True)
        return
    source = KEY_POOL / slot
    scratch = None
    if not all((source / f).exists() for f in files):
        scratch = Path(tempfile.mkdtemp(dir=KEY_POOL, prefix=f".{slot}."))
        (scratch / "etc" / "ssh").mkdir(parents=True)
        subprocess.run(["ssh-keygen", "-A", "-f", str(scratch)], check=True, capture_output=True)
        try:
            os.rename(scratch / "etc" / "ssh", source)  # atomic: a racing bed's keys or these
        except OSError:
            pass
        if not all((source / f).exists() for f in files):  # a slot left half made: use these
            source = scratch / "etc" / "ssh"
    ssh_dir = root / "etc" / "ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy2(source / f, ssh_dir / f)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def client_key(bed_dir: Path) -> str:
    """The bed's client key (``DIR/client/id_ed25519``, made once), whose
    public half every node authorises for root
    (``DIR/client/authorized_keys``)."""
    client = bed_dir / "client"
    client.mkdir(exist_ok=True)
    key = client / "id_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bed-client", "-f", str(key)], check=True)
    shutil.copyfile(f"{key}.pub", client / "authorized_keys")
    return str(key)
