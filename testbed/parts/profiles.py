"""The profile nodes (``--profile NAME``): an sshd set-up modelled on a
distribution (``PROFILES``; fixtures in testbed/profiles), each in its own
mount and network namespace where ``/etc`` and ``/run`` are the node's own,
``systemctl`` is the stand-in of ``standin_systemd.py`` and the emulator
answers on 127.0.0.1 at its own port. Release profiles run a Debian
release's userland in a chroot instead. Not registered in EC2."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .host import HERE, in_netns, wait_banner
from .keys import node_host_keys
from .nodes import RELEASES, SSHD, release_fs
from .state import Node

if TYPE_CHECKING:
    from .context import BedContext

PROFILE_DIR = HERE / "profiles"


@dataclass(frozen=True)
class Profile:
    """How a profile node differs from a login node: a distribution's
    sshd set-up (testbed/profiles/README.md)."""

    # testbed/profiles/<fixture>/etc: the distribution's /etc/ssh.
    fixture: str
    # The systemd service (None: no systemd, sshd's pid file).
    unit: str | None
    # Socket activation (ssh.socket in front of a private sshd).
    socket: bool = False
    # Where sshd listens in the namespace.
    address: str = "127.0.0.1"
    port: int = 22
    # sshd_config.d files to add, and text to append to sshd_config.
    drop_ins: tuple[tuple[str, str], ...] = ()
    append: str = ""
    # sshd_config a symlink into a config management tree.
    symlink: bool = False
    # Key types whose files are removed.
    missing: tuple[str, ...] = ()
    # A host certificate of its own, from a CA of its own.
    certificate: bool = False
    # An unmanaged ECDSA P-384 key that a hardening drop-in lists first.
    p384: bool = False
    # IPv6 on in the namespace.
    ipv6: bool = True
    # A Debian suite of RELEASES: the node runs that release's userland
    # (its sshd, ssh, ssh-keygen and libraries) in a chroot, with its own
    # stock /etc/ssh; no systemd (reload by pid file).
    release: str | None = None


_DEBIAN = Profile(fixture="debian-12", unit="ssh")
PROFILES: dict[str, Profile] = {
    "debian-12": _DEBIAN,
    "ubuntu-24.04": Profile(fixture="ubuntu-24.04", unit="ssh", socket=True),
    "ubuntu-20.04": Profile(fixture="ubuntu-20.04", unit="ssh"),
    "al2023": Profile(fixture="al2023", unit="sshd"),
    "al2": Profile(fixture="al2", unit="sshd"),
    "no-systemd": replace(_DEBIAN, unit=None),
    "ipv6-off": replace(_DEBIAN, ipv6=False),
    "listen-address": replace(
        _DEBIAN, address="127.0.0.5", drop_ins=(("50-listen.conf", "ListenAddress 127.0.0.5\n"),)
    ),
    "port-2222": replace(_DEBIAN, port=2222, drop_ins=(("50-port.conf", "Port 2222\n"),)),
    "match-forcecommand": replace(
        _DEBIAN, append="\nMatch User backup\n\tForceCommand internal-sftp\n\tAllowTcpForwarding no\n"
    ),
    "symlinked-config": replace(_DEBIAN, symlink=True),
    "keys-shared": _DEBIAN,
    "missing-key-type": replace(_DEBIAN, missing=("ecdsa",)),
    "host-certificate": replace(_DEBIAN, certificate=True),
    "unmanaged-p384": replace(_DEBIAN, p384=True),
    # OpenSSH 8.4p1: close to Ubuntu 20.04's 8.2 and RHEL 9's 8.7.
    "debian-11": Profile(fixture="", unit=None, release="bullseye"),
    # OpenSSH 10.0p2: PerSourcePenalties on, sshd-session, ML-KEM first.
    "debian-13": Profile(fixture="", unit=None, release="trixie"),
    # Debian 13 with penalties that refuse a source after one connection.
    "debian-13-penalties": Profile(
        fixture="",
        unit=None,
        release="trixie",
        drop_ins=(("50-penalties.conf", "PerSourcePenalties noauth:15 min:1\n"),),
    ),
}

BED_HEADER = """# test bed: the bed's client key may log in as root (first value wins).
# Below is the distribution's default config (testbed/profiles/README.md).
AuthorizedKeysFile {keys}
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
"""


# ------------------------------------------------------------ preparing


def prepare_profile(bed: BedContext, name: str) -> Node:
    """Profile node ``name``: its /etc (the distribution's ssh files, or a
    release's own), host keys, sshd set-up and /run."""
    if name not in PROFILES:
        raise SystemExit(f"bed: no profile {name!r}; profiles: {', '.join(PROFILES)}")
    spec = PROFILES[name]
    root = bed.dir / "profiles" / name
    etc, run = root / "etc", root / "run"
    root.mkdir(parents=True)
    profile_etc(spec, root, etc)
    (etc / "ssh" / "sshd_config.d").mkdir(exist_ok=True)
    node_host_keys(root, f"net{bed.state['net']}-profile-{name}")
    ssh = etc / "ssh"
    config = ssh / "sshd_config"
    keys = bed.dir / "client" / "authorized_keys"
    config.write_text(BED_HEADER.format(keys=keys) + config.read_text() + spec.append)
    profile_sshd(spec, name, root, etc)
    for sub in ("sshd", "standin-systemd"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(run / "sshd", 0o755)
    (root / "var/lib/hostkeyctl").mkdir(parents=True)
    system_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    # A release node has no Python for the stand-in systemctl.
    stand_ins = "" if spec.release else f"{HERE / 'node-bin'}:"
    path = f"{stand_ins}{bed.args.bin_dir or ''}:{system_path}"
    return Node(
        name=f"{bed.args.cluster}-{name}",
        profile=name,
        chroot=spec.release is not None,
        address=spec.address,
        port=spec.port,
        root=str(root),
        ssh_dir=str(ssh),
        sshd_config=str(config),
        pid_file=str(run / "sshd.pid"),
        log=str(root / "sshd.log"),
        env={
            **bed.node_credentials,
            "HOSTKEYCTL_PACING_DIR": bed.pacing_dir,
            "PATH": path,
            "HOSTKEYCTL_STATE_DIR": str(root / "var/lib/hostkeyctl"),
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{bed.server.server_port}",
        },
    )


def profile_etc(spec: Profile, root: Path, etc: Path) -> None:
    """A profile node's /etc: a release's own /etc/ssh (bound over the
    chroot's), or the host's /etc with the distribution's ssh files."""
    if spec.release:
        # The release's own /etc/ssh, bound over the chroot's, and its
        # stock sshd_config kept for comparing.
        fs = release_fs(spec.release)
        etc.mkdir()
        shutil.copytree(fs / "etc" / "ssh", etc / "ssh", symlinks=True)
        (root / "stock").mkdir()
        shutil.copy2(fs / "etc" / "ssh" / "sshd_config", root / "stock" / "sshd_config")
    else:
        # The node's /etc: the host's (users, libraries' config), with the
        # distribution's ssh (and crypto-policies) files instead of ours.
        subprocess.run(["cp", "-a", "/etc/.", str(etc)], check=True)
        shutil.rmtree(etc / "ssh")
        shutil.copytree(
            PROFILE_DIR / spec.fixture / "etc", etc, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".keep")
        )


def profile_sshd(spec: Profile, name: str, root: Path, etc: Path) -> None:
    """What a profile changes in the distribution's sshd set-up: drop-ins,
    missing key types, a symlinked config, a host certificate, an
    unmanaged P-384 key."""
    ssh = etc / "ssh"
    config = ssh / "sshd_config"
    for file, text in spec.drop_ins:
        (ssh / "sshd_config.d" / file).write_text(text)
    for key_type in spec.missing:
        for suffix in ("", ".pub"):
            (ssh / f"ssh_host_{key_type}_key{suffix}").unlink()
    if spec.symlink:
        managed = etc / "config-mgmt"
        managed.mkdir()
        config.rename(managed / "sshd_config")
        config.symlink_to("../config-mgmt/sshd_config")
    if spec.certificate:
        ca = root / "host_ca"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ca)], check=True)
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-s",
                str(ca),
                "-I",
                name,
                "-h",
                "-n",
                "login.example",
                str(ssh / "ssh_host_ed25519_key.pub"),
            ],
            check=True,
            capture_output=True,
        )
        (ssh / "sshd_config.d" / "50-host-certificate.conf").write_text(
            "HostCertificate /etc/ssh/ssh_host_ed25519_key-cert.pub\n"
        )
    if spec.p384:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", str(ssh / "ssh_host_ecdsa384_key")],
            check=True,
        )
        (ssh / "sshd_config.d" / "00-cis-hardening.conf").write_text(
            "# site hardening: sorts before hostkeyctl's drop-in\n"
            + "".join(f"HostKey /etc/ssh/ssh_host_{t}_key\n" for t in ("ed25519", "ecdsa", "rsa", "ecdsa384"))
            + "HostKeyAlgorithms ssh-ed25519,ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,rsa-sha2-512,rsa-sha2-256\n"
        )


# ------------------------------------------------------------- starting


def start_profile(bed: BedContext, node: Node) -> None:
    """Starts a profile node: the process holding its namespaces, the
    emulator's port inside them, then its sshd (or ssh.socket's activator)."""
    assert node.profile is not None  # a profile node's
    spec = PROFILES[node.profile]
    root = Path(node.root)
    if spec.release:
        script = release_root_script(bed, node, RELEASES / spec.release)
    else:
        script = f"mount --bind {root / 'etc'} /etc && mount --bind {root / 'run'} /run && ip link set lo up"
        if not spec.ipv6:
            script += " && for c in all default lo; do echo 1 > /proc/sys/net/ipv6/conf/$c/disable_ipv6; done"
        script += " && : > /run/ns-ready && exec sleep infinity"
    holder = bed.spawn(
        f"{node.name}-ns",
        ["unshare", "--mount", "--net", "--propagation", "private", "--", "sh", "-c", script],
        Path(node.log),
    )
    deadline = time.time() + 10
    while not (root / "run/ns-ready").exists():
        if holder.poll() is not None or time.time() > deadline:
            raise SystemExit(f"bed: the namespace of {node.name} did not come up; see {node.log}")
        time.sleep(0.02)
    node.ns_pid = holder.pid
    enter = ["nsenter", f"--mount=/proc/{holder.pid}/ns/mnt", f"--net=/proc/{holder.pid}/ns/net"]
    if node.chroot:
        enter += [f"--root=/proc/{holder.pid}/root", f"--wd=/proc/{holder.pid}/root"]
    enter.append("--")
    forward_emulator(bed.server.server_port, holder.pid)
    unit = spec.unit
    if spec.socket:
        start_socket(bed, node, enter, str(unit), deadline)
        return
    proc = bed.spawn(node.name, enter + [SSHD, "-D", "-e"], Path(node.log))
    if unit:
        (root / f"run/standin-systemd/{unit}.service.json").write_text(json.dumps({"MainPID": proc.pid}))
    in_netns(holder.pid, lambda: wait_banner(node.address, node.port, deadline))


def start_socket(bed: BedContext, node: Node, enter: list[str], unit: str, deadline: float) -> None:
    """``ssh.socket`` (socket activation): the stand-in activator listens
    on port 22 and starts a private sshd at the first connection."""
    bed.spawn(
        node.name,
        enter
        + [
            "python3",
            str(HERE / "standin_systemd.py"),
            "socket",
            "--socket",
            f"{unit}.socket",
            "--service",
            f"{unit}.service",
            "--listen",
            "0.0.0.0:22",
            "--listen",
            "[::]:22",
            "--backend",
            "127.0.0.1:10022",
            "--log",
            node.log,
            "--",
            SSHD,
            "-D",
            "-e",
            "-o",
            "ListenAddress=127.0.0.1:10022",
        ],
        Path(node.log),
    )
    while not (Path(node.root) / f"run/standin-systemd/{unit}.socket.json").exists():
        if time.time() > deadline:
            raise SystemExit(f"bed: {unit}.socket of {node.name} did not come up; see {node.log}")
        time.sleep(0.02)


def release_root_script(bed: BedContext, node: Node, fs: Path) -> str:
    """The namespace holder of a release node: the release's file system
    read-only under a writable overlay (on a tmpfs, gone with the
    namespace), the node's /etc/ssh and /run over the chroot's, /proc,
    /dev, and the bed's directory and the bin dir at their own paths;
    then it waits in the chroot, whose root ``nsenter --root`` enters."""
    root = Path(node.root)
    top = root / "mnt"
    top.mkdir()
    merged = top / "fs"
    binds = [(root / "etc" / "ssh", merged / "etc/ssh"), (root / "run", merged / "run")]
    shared = [bed.dir] + ([Path(bed.args.bin_dir)] if bed.args.bin_dir else [])
    q = shlex.quote
    steps = [
        f"mount -t tmpfs tmpfs {q(str(top))}",
        f"mkdir {q(f'{top}/up')} {q(f'{top}/work')} {q(str(merged))}",
        f"mount -t overlay overlay -o {q(f'lowerdir={fs},upperdir={top}/up,workdir={top}/work')} {q(str(merged))}",
    ]
    steps += [f"mount --bind {q(str(a))} {q(str(b))}" for a, b in binds]
    for path in shared:
        steps += [f"mkdir -p {q(f'{merged}{path}')}", f"mount --bind {q(str(path))} {q(f'{merged}{path}')}"]
    steps += [
        f"mount -t proc proc {q(f'{merged}/proc')}",
        f"mount --rbind /dev {q(f'{merged}/dev')}",
        "ip link set lo up",
        f": > {q(f'{root}/run/ns-ready')}",
        f"exec chroot {q(str(merged))} sleep infinity",
    ]
    return " && ".join(steps)


def forward_emulator(port: int, ns_pid: int) -> None:
    """Makes the emulator answer on 127.0.0.1:<its port> inside a namespace."""
    from standin_systemd import splice

    def listen() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        return s

    listener = in_netns(ns_pid, listen)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
                upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                continue
            threading.Thread(target=splice, args=(conn, upstream), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
