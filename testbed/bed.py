#!/usr/bin/env python3
"""The hostkeyctl test bed: the whole world on loopback.

    python3 testbed/bed.py up --dir DIR [--nodes 3] [--no-reexec] [--virtual N] ...
    python3 testbed/bed.py down --dir DIR

``up`` starts, and supervises until told to stop:

* the AWS emulator (``emulator.py``: moto + an SSM agent) on 127.0.0.1, a free port;
* N login nodes: real ``sshd`` processes, each with its own fresh host keys
  (rsa, ecdsa, ed25519: different per node, the problem hostkeyctl solves),
  config and pid file, on 127.K.0.(11+i) port 22, registered in the emulator
  as running EC2 instances tagged ``Role=login``, ``Cluster=<name>`` with that
  PrivateIpAddress, plus noise (compute nodes, a stopped login node, a login
  node of another cluster) and optionally N "virtual" instances with no sshd
  (``Role=login``, ``Cluster=virtual``)
  (with ``--virtual-shared``, they share the first node's address and sshd);
* HAProxy in TCP mode, round robin with health checks, on 127.K.0.10:22;
* with ``--profile NAME`` (repeatable), profile nodes: sshd set-ups modelled
  on a distribution's defaults (``PROFILES``; fixtures in testbed/profiles),
  each in its own mount and network namespace, where ``/etc`` and ``/run``
  are the node's own, sshd listens where the distribution's config says
  (port 22 on every address of the namespace), and ``systemctl`` is the
  stand-in of ``standin_systemd.py``. The emulator is reachable there at
  127.0.0.1 on its own port. Profile nodes are not registered in EC2.

K is a free network index (a lock file per index), so beds run in parallel.
When everything answers, ``up`` writes ``DIR/bed.json`` and prints the same
JSON on one stdout line. It tears everything down on SIGTERM/SIGINT, on
``down``, or (with ``--watch-stdin``) when its stdin closes, which is how the
Rust test helper makes sure nothing outlives a test, even a panicking one.
Every child also gets SIGTERM if the supervisor dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import queue
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

LOCK_DIR = Path("/tmp/hostkeyctl-bed-locks")
# Host keys made once and reused by later beds (node_host_keys).
KEY_POOL = Path("/tmp/hostkeyctl-bed-keys")
REGION = "us-east-1"
SSHD = "/usr/sbin/sshd"
HAPROXY = "/usr/sbin/haproxy"
KEY_TYPES = ["rsa", "ecdsa", "ed25519"]
PROFILE_DIR = HERE / "profiles"
# Other OpenSSH releases' root file systems (scripts/build-releases.sh).
RELEASES = Path(os.environ.get("HOSTKEYCTL_RELEASES", "/var/cache/hostkeyctl-bed/releases"))
POLICY_DIR = HERE.parent / "iam"
CLONE_NEWNET = 0x40000000


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


@dataclass
class Node:
    """One sshd node of the bed: a login node (registered in EC2) or a
    profile node (its own namespaces, not registered). bed.json holds
    ``as_json()`` of it, which tests/it/common/bed.rs reads."""

    name: str
    address: str
    port: int
    root: str
    ssh_dir: str
    sshd_config: str
    pid_file: str
    log: str
    # The environment the SSM agent gives commands on this node.
    env: dict[str, str]
    # How the bed starts its sshd (login nodes), and reloads it.
    argv: list[str] = field(default_factory=list)
    reload_command: str = ""
    # The profile (profile nodes).
    profile: str | None = None
    instance_id: str = ""
    pid: int | None = None
    # The process holding a profile node's namespaces.
    ns_pid: int | None = None
    # A release node: commands enter its chroot (the holder's root), where
    # the bed's directory and the bin dir are at their own paths.
    chroot: bool = False

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


BED_HEADER = """# test bed: the bed's client key may log in as root (first value wins).
# Below is the distribution's default config (testbed/profiles/README.md).
AuthorizedKeysFile {keys}
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
"""


def log(msg: str) -> None:
    print(f"[bed] {msg}", file=sys.stderr, flush=True)


def without_root_bashrc(argv: list[str]) -> list[str]:
    """``argv`` in a private mount namespace where root's ``~/.bashrc`` is
    empty. sshd runs every command through the user's shell, and Debian's
    bash sources ``~/.bashrc`` for commands sshd runs; this machine's root
    has pyenv's set-up there, about 0.12 s of CPU per login (measured with
    perf: three quarters of a login's CPU), which a login node would not
    pay. The file stays as it is for everything else."""
    bashrc = Path.home() / ".bashrc"
    if not bashrc.is_file():
        return argv
    mask = f'mount --bind /dev/null {shlex.quote(str(bashrc))} && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mask, "sshd-node", *argv]


def _die_with_parent() -> None:
    """preexec_fn: SIGTERM this child when the supervisor's main thread dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def require(path: str, package: str) -> str:
    found = path if os.path.exists(path) else shutil.which(os.path.basename(path))
    if not found:
        raise SystemExit(f"bed: {path} not found; install it with `make deps` or `apt-get install {package}`")
    return found


def allocate_net(requested: int | None) -> tuple[int, Any]:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    candidates = [requested] if requested is not None else range(0, 250)
    for k in candidates:
        handle = open(LOCK_DIR / f"net-{k}.lock", "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return k, handle
        except BlockingIOError:
            handle.close()
    raise SystemExit("bed: no free network index (another bed holds each lock in /tmp/hostkeyctl-bed-locks)")


def in_netns(ns_pid: int, fn: Any) -> Any:
    """Runs fn in a thread that joined the network namespace of ns_pid: the
    sockets it creates belong there, whichever thread uses them later."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            fd = os.open(f"/proc/{ns_pid}/ns/net", os.O_RDONLY)
            try:
                if ctypes.CDLL("libc.so.6", use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller
            box["error"] = e

    t = threading.Thread(target=work)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def wait_banner(host: str, port: int, deadline: float) -> str:
    last = ""
    while time.time() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1) as s:
                s.settimeout(2)
                data = s.recv(256)
                if data.startswith(b"SSH-"):
                    return data.decode().strip()
                last = repr(data)
        except OSError as e:
            last = str(e)
        time.sleep(0.05)
    raise RuntimeError(f"no SSH banner from {host}:{port}: {last}")


def share_botocore_loader() -> None:
    """One botocore data loader for the whole process, before moto loads.

    moto's EC2 (at import, three times), moto's responses and every boto3
    client of the bed each open a botocore session, and each session parses
    the service models again (EC2's is megabytes of JSON): over a third of
    the bed's start-up CPU, paid by every test that starts a bed. A loader
    keeps what it parsed, and the models it hands out are shared by the
    clients of one session already; sharing one loader between sessions
    parses each model once per process. A custom data path (AWS_DATA_PATH)
    gets its own loader, as before.
    """
    import botocore.loaders
    import botocore.session

    if getattr(botocore.loaders.create_loader, "shared_by_bed", False):
        return
    original = botocore.loaders.create_loader
    loader = original()

    def create_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
        return loader if search_path_string is None else original(search_path_string)

    create_loader.shared_by_bed = True  # type: ignore[attr-defined]
    botocore.loaders.create_loader = create_loader
    botocore.session.create_loader = create_loader


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


class Bed:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.dir = Path(args.dir).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        # What every hostkeyctl on the bed owes the nodes' sshd: one source
        # (loopback), one ledger, apart from the host's and other beds'.
        self.pacing_dir = str(self.dir / "pacing")
        self.children: dict[str, subprocess.Popen] = {}
        self.main_queue: queue.Queue = queue.Queue()
        self.stop_event = threading.Event()
        self.state: dict[str, Any] = {}
        self.nodes: list[Node] = []

    # ------------------------------------------------------------ processes

    def spawn(self, name: str, argv: list[str], logfile: Path) -> subprocess.Popen:
        """Starts a supervised child. Must run on the main thread (PDEATHSIG
        follows the thread that forked)."""
        out = open(logfile, "ab")
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, preexec_fn=_die_with_parent, close_fds=True
        )
        out.close()
        self.children[name] = proc
        return proc

    def stop_child(self, name: str) -> None:
        proc = self.children.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # ----------------------------------------------------------------- AWS

    def start_emulator(self) -> None:
        import logging

        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        share_botocore_loader()

        from emulator import Emulator

        self.emulator = Emulator(REGION, log_dir=str(self.dir))
        self.server = make_server("127.0.0.1", 0, self.emulator, threaded=True)
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.emulator.base_env = {
            "PATH": f"{self.args.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
            if self.args.bin_dir
            else os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.dir),
            "LANG": "C.UTF-8",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            # The connection budget's ledger (scan::pacing), the bed's own.
            "HOSTKEYCTL_PACING_DIR": self.pacing_dir,
        }
        self.emulator.control_hooks["/_bed/nodes/stop"] = lambda r: self.on_main("stop", r)
        self.emulator.control_hooks["/_bed/nodes/start"] = lambda r: self.on_main("start", r)
        self.emulator.control_hooks["/_bed/nodes/launch"] = lambda r: self.on_main("launch", r)

    def create_roles(self) -> None:
        """One IAM user per shipped policy (``iam/<role>.json``, with the
        bed's account in place of the example one), each with an access key
        of its own, and ``bed-root``, allowed everything, for the bed's own
        calls and what a test reads or tampers with on purpose. Made with the
        ordinary IAM API before enforcement starts (``iam.py``)."""
        import boto3

        from emulator import ACCOUNT
        from emulator.iam import ALLOW_ALL, BED_ROOT, ROLES, policy_for_bed

        client = boto3.client(
            "iam",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        credentials: dict[str, dict[str, str]] = {}
        for role in (*ROLES, BED_ROOT):
            if role == BED_ROOT:
                user, document = BED_ROOT, json.dumps(ALLOW_ALL)
            else:
                user = f"hostkeyctl-{role}"
                document = policy_for_bed((POLICY_DIR / f"{role}.json").read_text(), ACCOUNT)
            client.create_user(UserName=user)
            arn = client.create_policy(PolicyName=user, PolicyDocument=document)["Policy"]["Arn"]
            client.attach_user_policy(UserName=user, PolicyArn=arn)
            key = client.create_access_key(UserName=user)["AccessKey"]
            credentials[role] = {"access_key_id": key["AccessKeyId"], "secret_access_key": key["SecretAccessKey"]}
        self.state["credentials"] = credentials
        node_key = credentials["node"]
        # Every node (the SSM agent's commands, timers, the lifecycle step)
        # signs with the node role.
        self.node_credentials = {
            "AWS_ACCESS_KEY_ID": node_key["access_key_id"],
            "AWS_SECRET_ACCESS_KEY": node_key["secret_access_key"],
        }
        self.emulator.base_env.update(self.node_credentials)

    def ec2(self) -> Any:
        """EC2 as the bed's own account (``bed-root``: once IAM is enforced,
        a held node's launch must be signed)."""
        import boto3

        from emulator.iam import BED_ROOT

        root = self.state.get("credentials", {}).get(BED_ROOT, {})
        return boto3.client(
            "ec2",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=root.get("access_key_id", "testing"),
            aws_secret_access_key=root.get("secret_access_key", "testing"),
        )

    def register_instances(self, net: int) -> None:
        from moto.ec2.models.amis import AMIS

        ec2 = self.ec2()
        # One of moto's built-in images, asked for by id: every image of
        # the region in one answer took a second of the bed's start-up.
        image = ec2.describe_images(ImageIds=[AMIS[0]["ami_id"]])["Images"][0]["ImageId"]
        cluster = self.args.cluster

        def run(ip: str | None, tags: dict[str, str], count: int = 1) -> list[str]:
            kwargs: dict[str, Any] = {
                "ImageId": image,
                "MinCount": count,
                "MaxCount": count,
                "InstanceType": "m5.xlarge",
                "TagSpecifications": [
                    {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                ],
            }
            if ip:
                kwargs["PrivateIpAddress"] = ip
            return [i["InstanceId"] for i in ec2.run_instances(**kwargs)["Instances"]]

        self.run_instance = run
        for node in self.launched():
            node.instance_id = run(node.address, self.login_tags(node))[0]
        noise = []
        for i in range(2):
            iid = run(
                f"127.{net}.1.{11 + i}", {"Name": f"{cluster}-compute-{i + 1}", "Role": "compute", "Cluster": cluster}
            )[0]
            noise.append({"instance_id": iid, "kind": "compute", "state": "running"})
        stopped = run(f"127.{net}.1.30", {"Name": f"{cluster}-login-stopped", "Role": "login", "Cluster": cluster})[0]
        ec2.stop_instances(InstanceIds=[stopped])
        noise.append({"instance_id": stopped, "kind": "login", "state": "stopped"})
        other = run(f"127.{net}.1.40", {"Name": "other-login-1", "Role": "login", "Cluster": "other"})[0]
        noise.append({"instance_id": other, "kind": "login of cluster 'other'", "state": "running"})
        self.state["noise"] = noise
        virtual: list[str] = []
        remaining = self.args.virtual
        while remaining > 0:
            batch = min(remaining, 100)
            virtual += run(None, {"Role": "login", "Cluster": "virtual"}, batch)
            remaining -= batch
        self.state["virtual"] = virtual
        if self.args.virtual_shared and virtual:
            self.share_first_node(virtual)

    def login_tags(self, node: Node) -> dict[str, str]:
        return {"Name": node.name, "Role": "login", "Cluster": self.args.cluster}

    def launched(self) -> list[Node]:
        """The login nodes but the last ``--held``, which boot (their sshd
        runs) but are launched in EC2 only by ``POST /_bed/nodes/launch``."""
        return self.nodes[: len(self.nodes) - self.args.held]

    def launch(self, node: Node) -> dict[str, Any]:
        """A held node comes online: its instance runs with the login tags,
        its SSM agent registers, and State Manager applies the associations
        that target it (emulator/associations.py)."""
        if node.instance_id:
            raise ValueError(f"{node.name} is already launched ({node.instance_id})")
        node.instance_id = self.run_instance(node.address, self.login_tags(node))[0]
        self.emulator.nodes[node.instance_id] = self._node_env(node)
        self.emulator.instance_online(node.instance_id, REGION)
        self.state["nodes"] = [n.as_json() for n in self.nodes]
        (self.dir / "bed.json").write_text(json.dumps(self.state, indent=2))
        return {"launched": node.name, "instance_id": node.instance_id}

    def share_first_node(self, virtual: list[str]) -> None:
        """``--virtual-shared``: every virtual instance is the first node
        under another instance id. Its PrivateIpAddress becomes the node's
        (EC2 refuses a duplicate address, so the emulator's record is set
        directly), so audits and rotations handshake with a real sshd, on
        loopback; and its agent runs the stand-in in its shared mode, which
        installs on that node once per distinct command line."""
        from moto.ec2.models import ec2_backends

        from emulator import ACCOUNT

        if not self.nodes:
            raise SystemExit("bed: --virtual-shared needs --nodes 1 or more (the node the virtual instances share)")
        shared = self.nodes[0]
        backend = ec2_backends[ACCOUNT][REGION]
        for iid in virtual:
            backend.get_instance(iid).nics[0].private_ip_address = shared.address
        real = shutil.which("hostkeyctl", path=self.emulator.base_env["PATH"])
        if not real:
            raise SystemExit("bed: --virtual-shared needs hostkeyctl on the nodes' PATH (--bin-dir)")
        cache = self.dir / "virtual-shared"
        cache.mkdir(exist_ok=True)
        env = dict(shared.env)
        env.update({"HOSTKEYCTL_VIRTUAL_SHARED": str(cache), "HOSTKEYCTL_VIRTUAL_REAL": real})
        self.emulator.virtual_shared = (shared.root, env)

    def register_lb_and_cluster(self, net: int) -> None:
        """What `--target lb:`, `tg:` and `hyperpod:` find: two network load
        balancers with a TCP listener on 22, one forwarding to an IP target
        group of the nodes' addresses, one to an instance target group of
        their instance ids; and a HyperPod cluster whose login group holds
        the nodes (plus ``--hyperpod-workers`` workers at addresses where
        nothing listens). The load balancers' DNS name is the bed's HAProxy."""
        import boto3
        from moto.elbv2.models import elbv2_backends
        from moto.sagemaker.models import sagemaker_backends

        from emulator import ACCOUNT

        kwargs = dict(
            endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        ec2, elb = self.ec2(), boto3.client("elbv2", **kwargs)
        vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
        subnets = [
            s["SubnetId"] for s in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
        ][:2]
        cluster = self.args.cluster
        state: dict[str, Any] = {}
        for kind, targets in (
            ("ip", [{"Id": n.address, "Port": 22} for n in self.launched()]),
            ("instance", [{"Id": n.instance_id, "Port": 22} for n in self.launched()]),
        ):
            suffix = "" if kind == "ip" else "-i"
            tg = elb.create_target_group(
                Name=f"{cluster}-login{suffix}",
                Protocol="TCP",
                Port=22,
                VpcId=vpc,
                TargetType=kind,
                HealthCheckProtocol="TCP",
            )["TargetGroups"][0]["TargetGroupArn"]
            elb.register_targets(TargetGroupArn=tg, Targets=targets)
            lb = elb.create_load_balancer(
                Name=f"{cluster}-login{suffix}", Type="network", Scheme="internal", Subnets=subnets
            )["LoadBalancers"][0]["LoadBalancerArn"]
            elb.create_listener(
                LoadBalancerArn=lb, Protocol="TCP", Port=22, DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}]
            )
            elbv2_backends[ACCOUNT][REGION].load_balancers[lb].dns_name = f"127.{net}.0.10"
            state[kind] = {"lb_name": f"{cluster}-login{suffix}", "lb_arn": lb, "target_group_arn": tg}
        self.state["elb"] = state

        sm = boto3.client("sagemaker", **kwargs)
        groups = []
        for name, count in (("login-group", len(self.launched())), ("worker-group", self.args.hyperpod_workers)):
            if count:
                groups.append(
                    {
                        "InstanceGroupName": name,
                        "InstanceType": "ml.m5.xlarge",
                        "InstanceCount": count,
                        "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/hp", "OnCreate": "on_create.sh"},
                        "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/hyperpod",
                        "ThreadsPerCore": 1,
                    }
                )
        if not groups:
            return
        sm.create_cluster(ClusterName=cluster, InstanceGroups=groups)
        model = sagemaker_backends[ACCOUNT][REGION].clusters[cluster]
        renamed = {}
        for i, (old_id, node) in enumerate(
            sorted(model.nodes.items(), key=lambda kv: (kv[1].instance_group_name, int(kv[0].rsplit("-", 1)[1])))
        ):
            node.instance_id = f"i-{0x0A0000000000000 + i:017x}"
            if node.instance_group_name == "login-group":
                node.bed_ip = self.nodes[int(old_id.rsplit("-", 1)[1])].address
            else:
                # Workers at addresses where nothing listens (connections refused).
                n = int(old_id.rsplit("-", 1)[1])
                node.bed_ip = f"127.{net}.{2 + n // 200}.{10 + n % 200}"
            node.bed_dns = f"ip-{node.bed_ip.replace('.', '-')}.ec2.internal"
            renamed[node.instance_id] = node
        model.nodes = renamed
        self.state["hyperpod"] = {
            "cluster": cluster,
            "nodes": {nid: n.bed_ip for nid, n in renamed.items()},
        }

    # --------------------------------------------------------------- nodes

    def prepare_node(self, i: int, net: int) -> Node:
        name = f"{self.args.cluster}-login-{i + 1}"
        root = self.dir / "nodes" / name
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
            f"AuthorizedKeysFile {self.dir}/client/authorized_keys\n"
            "PermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "PrintMotd no\n"
            # A "Connection from" line per connection: what the tests count.
            "LogLevel VERBOSE\n"
        )
        pid_file = root / "run" / "sshd.pid"
        argv = [SSHD, "-D", "-e", "-f", str(config)]
        if self.args.no_reexec:
            argv.insert(1, "-r")
        release = self.release_of(i)
        if release:
            argv = self.release_sshd(root, argv, release)
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
                **self.node_credentials,
                "HOSTKEYCTL_PACING_DIR": self.pacing_dir,
                "HOSTKEYCTL_SSH_DIR": str(ssh_dir),
                "HOSTKEYCTL_SSHD_CONFIG": str(config),
                "HOSTKEYCTL_RELOAD_COMMAND": f'kill -HUP "$(cat {pid_file})"',
                "HOSTKEYCTL_VERIFY_ADDRESS": f"{address}:22",
                "HOSTKEYCTL_STATE_DIR": str(root / "var/lib/hostkeyctl"),
                "HOSTKEYCTL_LOCK_FILE": str(root / "run/hostkeyctl.lock"),
            },
        )

    def release_of(self, i: int) -> str | None:
        """Login node ``i``'s Debian suite (``--release``: one for all, or a
        comma-separated list, one per node in turn, empty for the host's)."""
        if not self.args.release:
            return None
        suites = self.args.release.split(",")
        return suites[i % len(suites)] or None

    def release_sshd(self, root: Path, argv: list[str], release: str) -> list[str]:
        """A login node's sshd from another release (``--release``): in a
        mount namespace of its own (the network stays the host's, so the
        load balancer reaches it), the release's file system read-only
        under an overlay on a tmpfs, with the bed's directory, where every
        path of the node's config is, at its own path. sshd itself holds
        the namespace; its pid is the host's, for the reload."""
        fs = RELEASES / release
        if not (fs / ".built").is_file():
            raise SystemExit(
                f"bed: no {release} root file system in {RELEASES}: run scripts/build-releases.sh (make deps)"
            )
        top = root / "mnt"
        top.mkdir(exist_ok=True)
        merged = top / "fs"
        q = shlex.quote
        steps = [
            f"mount -t tmpfs tmpfs {q(str(top))}",
            f"mkdir {q(f'{top}/up')} {q(f'{top}/work')} {q(str(merged))}",
            f"mount -t overlay overlay -o {q(f'lowerdir={fs},upperdir={top}/up,workdir={top}/work')} {q(str(merged))}",
            f"mkdir -p {q(f'{merged}{self.dir}')}",
            f"mount --bind {q(str(self.dir))} {q(f'{merged}{self.dir}')}",
            f"mount -t proc proc {q(f'{merged}/proc')}",
            f"mount --rbind /dev {q(f'{merged}/dev')}",
            f"mkdir -p {q(f'{merged}/run/sshd')}",
            f"exec chroot {q(str(merged))} {shlex.join(argv)}",
        ]
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", " && ".join(steps)]

    def start_node(self, node: Node) -> None:
        proc = self.spawn(node.name, node.argv, Path(node.log))
        node.pid = proc.pid

    def prepare_profile(self, name: str) -> Node:
        if name not in PROFILES:
            raise SystemExit(f"bed: no profile {name!r}; profiles: {', '.join(PROFILES)}")
        spec = PROFILES[name]
        root = self.dir / "profiles" / name
        etc, run = root / "etc", root / "run"
        root.mkdir(parents=True)
        if spec.release:
            # The release's own /etc/ssh, bound over the chroot's, and its
            # stock sshd_config kept for comparing.
            fs = RELEASES / spec.release
            if not (fs / ".built").is_file():
                raise SystemExit(
                    f"bed: no {spec.release} root file system in {RELEASES}: run scripts/build-releases.sh (make deps)"
                )
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
        (etc / "ssh" / "sshd_config.d").mkdir(exist_ok=True)
        node_host_keys(root, f"net{self.state['net']}-profile-{name}")
        ssh = etc / "ssh"
        config = ssh / "sshd_config"
        keys = self.dir / "client" / "authorized_keys"
        config.write_text(BED_HEADER.format(keys=keys) + config.read_text() + spec.append)
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
        for sub in ("sshd", "standin-systemd"):
            (run / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(run / "sshd", 0o755)
        (root / "var/lib/hostkeyctl").mkdir(parents=True)
        system_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        # A release node has no Python for the stand-in systemctl.
        stand_ins = "" if spec.release else f"{HERE / 'node-bin'}:"
        path = f"{stand_ins}{self.args.bin_dir or ''}:{system_path}"
        return Node(
            name=f"{self.args.cluster}-{name}",
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
                **self.node_credentials,
                "HOSTKEYCTL_PACING_DIR": self.pacing_dir,
                "PATH": path,
                "HOSTKEYCTL_STATE_DIR": str(root / "var/lib/hostkeyctl"),
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.server.server_port}",
            },
        )

    def start_profile(self, node: Node) -> None:
        spec = PROFILES[node.profile]
        root = Path(node.root)
        if spec.release:
            script = self.release_root_script(node, RELEASES / spec.release)
        else:
            script = f"mount --bind {root / 'etc'} /etc && mount --bind {root / 'run'} /run && ip link set lo up"
            if not spec.ipv6:
                script += " && for c in all default lo; do echo 1 > /proc/sys/net/ipv6/conf/$c/disable_ipv6; done"
            script += " && : > /run/ns-ready && exec sleep infinity"
        holder = self.spawn(
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
        self.forward_emulator(holder.pid)
        unit = spec.unit
        if spec.socket:
            self.spawn(
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
            while not (root / f"run/standin-systemd/{unit}.socket.json").exists():
                if time.time() > deadline:
                    raise SystemExit(f"bed: {unit}.socket of {node.name} did not come up; see {node.log}")
                time.sleep(0.02)
            return
        proc = self.spawn(node.name, enter + [SSHD, "-D", "-e"], Path(node.log))
        if unit:
            (root / f"run/standin-systemd/{unit}.service.json").write_text(json.dumps({"MainPID": proc.pid}))
        in_netns(holder.pid, lambda: wait_banner(node.address, node.port, deadline))

    def release_root_script(self, node: Node, fs: Path) -> str:
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
        shared = [self.dir] + ([Path(self.args.bin_dir)] if self.args.bin_dir else [])
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

    def forward_emulator(self, ns_pid: int) -> None:
        """Makes the emulator answer on 127.0.0.1:<its port> inside a namespace."""
        from standin_systemd import splice

        port = self.server.server_port

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

    def start_client(self) -> None:
        client = self.dir / "client"
        client.mkdir(exist_ok=True)
        key = client / "id_ed25519"
        if not key.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bed-client", "-f", str(key)], check=True
            )
        shutil.copyfile(f"{key}.pub", client / "authorized_keys")
        self.state["client_key"] = str(key)

    def start_lb(self, net: int) -> None:
        address = f"127.{net}.0.10"
        check = f"check inter {self.args.lb_check_interval} fall 2 rise 1"
        servers = "".join(f"    server {n.name} {n.address}:22 {check}\n" for n in self.launched())
        config = self.dir / "haproxy.cfg"
        config.write_text(
            "global\n"
            "    maxconn 512\n"
            f"    pidfile {self.dir}/haproxy.pid\n"
            "defaults\n"
            "    mode tcp\n"
            "    timeout connect 2s\n"
            "    timeout client 120s\n"
            "    timeout server 120s\n"
            "frontend ssh\n"
            f"    bind {address}:22\n"
            "    default_backend login\n"
            "backend login\n"
            f"    balance {self.args.lb_balance}\n"
            # From its own address, as a Network Load Balancer whose IP
            # targets do not preserve the client's: every connection
            # through it, and its health checks, come from one source.
            f"    source {address}\n"
            "    option tcp-check\n"
            "    tcp-check expect rstring ^SSH-2.0-\n"
            f"{servers}"
        )
        self.spawn("haproxy", [HAPROXY, "-db", "-f", str(config)], self.dir / "haproxy.log")
        self.state["lb"] = {"address": address, "port": 22, "pid": self.children["haproxy"].pid}

    # ---------------------------------------------------- main-thread work

    def on_main(self, op: str, request: dict[str, Any]) -> Any:
        """Runs node operations on the main thread (they spawn processes)."""
        reply: queue.Queue = queue.Queue()
        self.main_queue.put((op, request, reply))
        ok, value = reply.get(timeout=30)
        if not ok:
            raise ValueError(value)
        return value

    def handle(self, op: str, request: dict[str, Any]) -> Any:
        node = next((n for n in self.nodes if n.name == request.get("name")), None)
        if node is None:
            raise ValueError(f"no node named {request.get('name')!r}")
        if op == "stop":
            self.stop_child(node.name)
            return {"stopped": node.name}
        if op == "start":
            self.stop_child(node.name)
            self.start_node(node)
            wait_banner(node.address, 22, time.time() + 10)
            return {"started": node.name, "pid": node.pid}
        if op == "launch":
            return self.launch(node)
        raise ValueError(op)

    # --------------------------------------------------------------- run

    def up(self) -> None:
        require(SSHD, "openssh-server")
        require(HAPROXY, "haproxy")
        require("/usr/bin/ssh-keygen", "openssh-client")
        Path("/run/sshd").mkdir(exist_ok=True)
        net, self.lock_handle = allocate_net(self.args.net)
        self.state.update({"dir": str(self.dir), "net": net, "region": REGION, "cluster": self.args.cluster})
        self.start_emulator()
        self.state["endpoint"] = self.endpoint
        self.create_roles()
        self.state["supervisor_pid"] = os.getpid()
        (self.dir / "bed.pid").write_text(str(os.getpid()))
        self.start_client()
        self.nodes = [self.prepare_node(i, net) for i in range(self.args.nodes)]
        self.profiles = [self.prepare_profile(p) for p in self.args.profile]
        for node in self.profiles:
            self.start_profile(node)
        self.state["profiles"] = [p.as_json() for p in self.profiles]
        self.register_instances(net)
        for node in self.nodes:
            self.start_node(node)
        deadline = time.time() + 20
        for node in self.nodes:
            wait_banner(node.address, 22, deadline)
        for node in self.launched():
            self.emulator.nodes[node.instance_id] = self._node_env(node)
            if self.args.no_ssm:
                self.emulator.unmanaged.add(node.instance_id)
        self.register_lb_and_cluster(net)
        if self.nodes:
            self.start_lb(net)
            for _ in range(len(self.nodes) * 2):
                wait_banner(self.state["lb"]["address"], 22, deadline)
        with self.emulator.lock:
            self.emulator.counts.clear()
        # From here on every request is checked against its signer's policy.
        self.emulator.iam.enabled = not self.args.no_iam
        self.state["iam"] = self.emulator.iam.enabled
        self.state["nodes"] = [n.as_json() for n in self.nodes]
        (self.dir / "bed.json").write_text(json.dumps(self.state, indent=2))
        print(json.dumps(self.state), flush=True)
        log(
            f"ready: {len(self.nodes)} nodes on 127.{net}.0.11+, LB {self.state.get('lb', {}).get('address')}, "
            f"AWS {self.endpoint}"
        )

    def _node_env(self, node: Node) -> Any:
        from emulator import NodeEnv

        return NodeEnv(node.instance_id, node.name, node.root, node.env)

    def serve(self) -> None:
        if self.args.watch_stdin:
            threading.Thread(target=self._watch_stdin, daemon=True).start()
        while not self.stop_event.is_set():
            try:
                op, request, reply = self.main_queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                reply.put((True, self.handle(op, request)))
            except Exception as e:  # reported to the caller of the control API
                reply.put((False, str(e)))

    def _watch_stdin(self) -> None:
        while sys.stdin.buffer.read(4096):
            pass
        self.stop_event.set()

    def down(self) -> None:
        if hasattr(self, "emulator"):
            self.emulator.close()
        for name in list(self.children):
            self.stop_child(name)
        if hasattr(self, "server"):
            self.server.shutdown()
        try:
            (self.dir / "bed.pid").unlink()
        except FileNotFoundError:
            pass
        log("torn down")


def cmd_up(args: argparse.Namespace) -> int:
    bed = Bed(args)
    signal.signal(signal.SIGTERM, lambda *_: bed.stop_event.set())
    signal.signal(signal.SIGINT, lambda *_: bed.stop_event.set())
    try:
        bed.up()
        bed.serve()
    except BaseException as e:
        log(f"failed: {e}")
        bed.down()
        raise
    bed.down()
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    pid_file = Path(args.dir) / "bed.pid"
    try:
        pid = int(pid_file.read_text())
    except (FileNotFoundError, ValueError):
        log(f"no bed running in {args.dir}")
        return 0
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return 0
    deadline = time.time() + 15
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 0
        time.sleep(0.05)
    log(f"supervisor {pid} did not stop in 15 s; killing it")
    os.kill(pid, signal.SIGKILL)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the bed and supervise it until stopped")
    up.add_argument("--dir", required=True, help="working directory for keys, configs, logs and bed.json")
    up.add_argument("--nodes", type=int, default=3, help="number of sshd login nodes")
    up.add_argument(
        "--virtual", type=int, default=0, help="extra running instances with no sshd (Role=login, Cluster=virtual)"
    )
    up.add_argument(
        "--held",
        type=int,
        default=0,
        help="the last N login nodes boot but are launched in EC2 (and reached by SSM) only by POST /_bed/nodes/launch",
    )
    up.add_argument("--cluster", default="hp", help="Cluster tag and node name prefix")
    up.add_argument("--net", type=int, default=None, help="network index K (default: first free)")
    up.add_argument("--no-reexec", action="store_true", help="start sshd with -r, so only a reload changes its keys")
    up.add_argument(
        "--no-ssm",
        action="store_true",
        help="the nodes' SSM agent is not registered: SendCommand refuses them (a pull-only fleet)",
    )
    up.add_argument(
        "--virtual-shared",
        action="store_true",
        help="virtual instances share the first node's address and sshd (rotation benchmarks)",
    )
    up.add_argument(
        "--hyperpod-workers", type=int, default=0, help="HyperPod worker nodes (no sshd) beside the login group"
    )
    up.add_argument("--profile", action="append", default=[], help=f"add a profile node ({', '.join(PROFILES)})")
    up.add_argument(
        "--no-iam",
        action="store_true",
        help="do not enforce the IAM policies (benchmarks: policy evaluation stays out of the figures)",
    )
    up.add_argument("--bin-dir", default=None, help="directory put first on the nodes' PATH (hostkeyctl)")
    up.add_argument(
        "--release",
        default=None,
        help="login nodes run this Debian suite's sshd (bullseye, trixie: scripts/build-releases.sh);"
        " a comma-separated list gives one per node in turn, empty for the host's (',bullseye,trixie')",
    )
    up.add_argument(
        "--lb-check-interval",
        default="1s",
        help="HAProxy's health check interval (an NLB's is 10 s or 30 s; each check is a connection)",
    )
    up.add_argument(
        "--lb-balance",
        default="roundrobin",
        help="HAProxy's balance algorithm (source: each client pinned to one backend, as NLB flow hashing does)",
    )
    up.add_argument("--watch-stdin", action="store_true", help="tear down when stdin closes")
    down = sub.add_parser("down", help="stop the bed running in DIR")
    down.add_argument("--dir", required=True)
    args = parser.parse_args()
    return cmd_up(args) if args.cmd == "up" else cmd_down(args)


if __name__ == "__main__":
    sys.exit(main())
