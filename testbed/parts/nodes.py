"""The login nodes: a real ``sshd -D`` each, with its own host keys and a
Debian-like config, on 127.K.0.(11+i) port 22; with ``--release``, that
Debian release's sshd in a chroot of its own."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from .host import HERE, without_root_bashrc
from .keys import KEY_TYPES, node_host_keys
from .state import Node

if TYPE_CHECKING:
    from .context import BedContext

SSHD = "/usr/sbin/sshd"
# Other OpenSSH releases' root file systems (scripts/build-releases.sh).
RELEASES = Path(os.environ.get("HOSTKEYCTL_RELEASES", "/var/cache/hostkeyctl-bed/releases"))


def release_fs(release: str) -> Path:
    """The root file system of a Debian suite (scripts/build-releases.sh)."""
    fs = RELEASES / release
    if not (fs / ".built").is_file():
        raise SystemExit(f"bed: no {release} root file system in {RELEASES}: run scripts/build-releases.sh (make deps)")
    return fs


def prepare_node(bed: BedContext, i: int, net: int) -> Node:
    """Login node ``i``: its root, host keys and sshd_config, and how to
    start its sshd."""
    name = f"{bed.args.cluster}-login-{i + 1}"
    root = bed.dir / "nodes" / name
    ssh_dir = root / "etc" / "ssh"
    (ssh_dir / "sshd_config.d").mkdir(parents=True, exist_ok=True)
    for sub in ("run", "var/lib/hostkeyctl"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    if not (ssh_dir / "ssh_host_ed25519_key").exists():
        node_host_keys(root, f"net{net}-node{i}")
    address = f"127.{net}.0.{11 + i}"
    config = ssh_dir / "sshd_config"
    host_keys = "".join(f"HostKey {ssh_dir}/ssh_host_{t}_key\n" for t in KEY_TYPES)
    config.write_text(
        f"# test bed node {name}: Debian-like layout, stock MaxStartups and KEX\n"
        f"Include {ssh_dir}/sshd_config.d/*.conf\n"
        f"ListenAddress {address}:22\n"
        f"{host_keys}"
        f"PidFile {root}/run/sshd.pid\n"
        f"AuthorizedKeysFile {bed.dir}/client/authorized_keys\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\n"
        "StrictModes no\n"
        "PrintMotd no\n"
        # A "Connection from" line per connection: what the tests count.
        "LogLevel VERBOSE\n"
    )
    if bed.args.crypto_policy:
        crypto_policy(root, ssh_dir)
    pid_file = root / "run" / "sshd.pid"
    argv = [SSHD, "-D", "-e", "-f", str(config)]
    if bed.args.no_reexec:
        argv.insert(1, "-r")
    release = release_of(bed.args.release, i)
    env_sshd = {}
    if release:
        argv = release_sshd(bed.dir, root, argv, release)
        env_sshd["HOSTKEYCTL_SSHD"] = str(release_sshd_command(root, pid_file))
    else:
        argv = without_root_bashrc(argv)
    return Node(
        name=name,
        address=address,
        port=22,
        root=str(root),
        ssh_dir=str(ssh_dir),
        sshd_config=str(config),
        pid_file=str(pid_file),
        log=str(root / "sshd.log"),
        argv=argv,
        reload_command=f'kill -HUP "$(cat {pid_file})"',
        env={
            **bed.node_credentials,
            "HOSTKEYCTL_PACING_DIR": bed.pacing_dir,
            "HOSTKEYCTL_SSH_DIR": str(ssh_dir),
            "HOSTKEYCTL_SSHD_CONFIG": str(config),
            "HOSTKEYCTL_RELOAD_COMMAND": f'kill -HUP "$(cat {pid_file})"',
            "HOSTKEYCTL_VERIFY_ADDRESS": f"{address}:22",
            "HOSTKEYCTL_STATE_DIR": str(root / "var/lib/hostkeyctl"),
            "HOSTKEYCTL_LOCK_FILE": str(root / "run/hostkeyctl.lock"),
            **env_sshd,
        },
    )


# The server back-end of RHEL 9's and Amazon Linux 2023's DEFAULT crypto
# policy (testbed/profiles/README.md): a KexAlgorithms without any
# post-quantum exchange, which OpenSSH 10.1 clients warn about.
CRYPTO_POLICY = HERE / "profiles/al2023/etc/crypto-policies/back-ends/opensshserver.config"


def crypto_policy(root: Path, ssh_dir: Path) -> None:
    """The node includes the policy as RHEL's ``50-redhat.conf`` does,
    from its own ``/etc/crypto-policies``."""
    policy = root / "etc/crypto-policies/back-ends/opensshserver.config"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(CRYPTO_POLICY.read_text())
    (ssh_dir / "sshd_config.d/50-redhat.conf").write_text(f"Include {policy}\n")


def release_sshd_command(root: Path, pid_file: Path) -> Path:
    """What a release node's commands run as ``sshd`` (hostkeyctl's
    ``HOSTKEYCTL_SSHD``): the release's own binary, in the namespace and
    root of the node's running sshd, so that ``sshd -t``, ``-T`` and
    ``-Q`` answer as the sshd that serves, not as the host's."""
    wrapper = root / "sshd-of-release"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"pid=$(cat {shlex.quote(str(pid_file))}) || exit 255\n"
        'exec nsenter --target "$pid" --mount --root --wd -- /usr/sbin/sshd "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def release_of(releases: str | None, i: int) -> str | None:
    """Login node ``i``'s Debian suite (``--release``: one for all, or a
    comma-separated list, one per node in turn, empty for the host's)."""
    if not releases:
        return None
    suites = releases.split(",")
    return suites[i % len(suites)] or None


def release_sshd(bed_dir: Path, root: Path, argv: list[str], release: str) -> list[str]:
    """A login node's sshd from another release (``--release``): in a
    mount namespace of its own (the network stays the host's, so the
    load balancer reaches it), the release's file system read-only
    under an overlay on a tmpfs, with the bed's directory, where every
    path of the node's config is, at its own path. sshd itself holds
    the namespace; its pid is the host's, for the reload."""
    fs = release_fs(release)
    top = root / "mnt"
    top.mkdir(exist_ok=True)
    merged = top / "fs"
    q = shlex.quote
    steps = [
        f"mount -t tmpfs tmpfs {q(str(top))}",
        f"mkdir {q(f'{top}/up')} {q(f'{top}/work')} {q(str(merged))}",
        f"mount -t overlay overlay -o {q(f'lowerdir={fs},upperdir={top}/up,workdir={top}/work')} {q(str(merged))}",
        f"mkdir -p {q(f'{merged}{bed_dir}')}",
        f"mount --bind {q(str(bed_dir))} {q(f'{merged}{bed_dir}')}",
        f"mount -t proc proc {q(f'{merged}/proc')}",
        f"mount --rbind /dev {q(f'{merged}/dev')}",
        f"mkdir -p {q(f'{merged}/run/sshd')}",
        f"exec chroot {q(str(merged))} {shlex.join(argv)}",
    ]
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", " && ".join(steps)]


def start_node(bed: BedContext, node: Node) -> None:
    """Starts (or restarts) a login node's sshd under the supervisor."""
    proc = bed.spawn(node.name, node.argv, Path(node.log))
    node.pid = proc.pid
