#!/usr/bin/env python3
"""make dist-check: what `make dist` produced is what the nodes can run.

Checks, each failing with what is wrong:
  - SHA256SUMS covers every file in dist/ and matches;
  - each binary is an ELF for its architecture and needs at most GLIBC_2.17
    (objdump -T), the figure printed;
  - the node builds are at most 10 MB, have `enroll`, `imds-guard` and `install` as their
    only commands and refuse the admin commands; `cargo tree` of the node
    build has no EC2, ELB, SageMaker, KMS or DynamoDB SDK (the SSM SDK only
    for PutComplianceItems, the Lambda SDK only for Invoke), no tables and
    no progress bars;
  - the aarch64 node build runs `--version` under qemu-user;
  - the x86_64 Lambda zip exists; each Lambda zip holds `bootstrap` alone (0755), an ELF for its
    architecture needing at most the glibc of provided.al2023 (2.34; the
    build targets 2.17), within Lambda's sizes (50 MB zipped, 250 MB
    unzipped); the x86_64 one is the admin build, byte for byte; run as
    `bootstrap` outside Lambda it refuses with exit 2, saying why;
  - the .deb (dpkg-deb -c) and the .rpm (rpm -qlp) hold the binary, the
    units (byte for byte the repository's), the completions and a man page
    for every subcommand.
The node builds' behaviour on real sshd nodes is `make dist-check`'s next
step: the install tests again, with HOSTKEYCTL_NODE_BIN_DIR.
"""

import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
MAX_GLIBC = (2, 17)
NODE_MAX_BYTES = 10 * 1000 * 1000
ELF_MACHINE = {"x86_64": 62, "aarch64": 183}
NOT_IN_NODE = [
    "aws-sdk-autoscaling",
    "aws-sdk-ec2",
    "aws-sdk-elasticloadbalancingv2",
    "aws-sdk-sagemaker",
    "aws-sdk-kms",
    "aws-sdk-dynamodb",
    "comfy-table",
    "indicatif",
    "clap_complete",
    "clap_mangen",
]
QEMU = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
UNITS = {
    "usr/lib/systemd/system/hostkeyctl-install.service": "contrib/systemd/hostkeyctl-install.service",
    "usr/lib/systemd/system/hostkeyctl-install.timer": "contrib/systemd/hostkeyctl-install.timer",
    "usr/lib/systemd/system/hostkeyctl-install.service.d/10-package.conf": (
        "contrib/systemd/package/hostkeyctl-install.service.d/10-package.conf"
    ),
}

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def version():
    match = re.search(r'^version = "(.+)"$', (ROOT / "Cargo.toml").read_text(), re.M)
    return match.group(1)


def sums():
    listed = {}
    for line in (DIST / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.lstrip("*")] = digest
    files = {p.name for p in DIST.iterdir() if p.name != "SHA256SUMS"}
    check(set(listed) == files, f"SHA256SUMS lists exactly the {len(files)} files in dist/")
    for name, digest in sorted(listed.items()):
        actual = hashlib.sha256((DIST / name).read_bytes()).hexdigest()
        check(actual == digest, f"SHA256SUMS matches {name}")


def glibc_needed(path):
    out = run(["objdump", "-T", str(path)])
    versions = {tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_([0-9.]+)\b", out.stdout)}
    return max(versions) if versions else None


def binary(path, arch):
    data = path.read_bytes()[:20]
    machine = int.from_bytes(data[18:20], "little")
    check(data[:4] == b"\x7fELF" and machine == ELF_MACHINE[arch], f"{path.name} is an ELF for {arch}")
    needed = glibc_needed(path)
    shown = ".".join(map(str, needed)) if needed else "none"
    check(needed is not None and needed <= MAX_GLIBC, f"{path.name} needs GLIBC_{shown} (at most 2.17)")
    stripped = ".symtab" not in run(["objdump", "-h", str(path)]).stdout
    check(stripped, f"{path.name} is stripped")


def node(arch):
    path = DIST / f"hostkeyctl-{arch}"
    binary(path, arch)
    size = path.stat().st_size
    check(size <= NODE_MAX_BYTES, f"{path.name} is {size / 1e6:.2f} MB (at most 10 MB)")
    prefix = QEMU if arch == "aarch64" else []
    shown = run([*prefix, str(path), "--version"])
    check(
        shown.returncode == 0 and shown.stdout.strip() == f"hostkeyctl {version()}",
        f"{path.name} --version says 'hostkeyctl {version()}' ({'qemu-user' if prefix else 'native'})",
    )
    helped = run([*prefix, str(path), "--help"])
    commands = help_commands(helped.stdout)
    only = ["enroll", "imds-guard", "install"]
    check(sorted(commands) == only, f"{path.name} has {', '.join(only)} as its only commands (has {commands})")
    refused = run([*prefix, str(path), "push", "--secret-id", "x"])
    check(
        refused.returncode == 2 and "unrecognized subcommand" in refused.stderr,
        f"{path.name} refuses admin commands (push: exit {refused.returncode})",
    )


def help_commands(text):
    section = text.split("Commands:", 1)[1].split("\n\n", 1)[0] if "Commands:" in text else ""
    names = [m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*)\s", section, re.M)]
    return [n for n in names if n != "help"]


def node_tree():
    out = run(
        [
            "cargo",
            "tree",
            "--locked",
            "--no-default-features",
            "--features",
            "node",
            "--target",
            "all",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ],
        cwd=ROOT,
    )
    check(out.returncode == 0, "cargo tree of the node build runs")
    crates = {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
    present = [c for c in NOT_IN_NODE if c in crates]
    check(not present, f"the node build's cargo tree has none of {', '.join(NOT_IN_NODE)} (has {present})")
    check("aws-sdk-secretsmanager" in crates, "the node build's cargo tree has aws-sdk-secretsmanager")


def expected_files(admin):
    commands = help_commands(run([str(admin), "--help"]).stdout)
    check(len(commands) >= 10, f"the admin build has every command ({', '.join(commands)})")
    man = ["usr/share/man/man1/hostkeyctl.1.gz"]
    man += [f"usr/share/man/man1/hostkeyctl-{c}.1.gz" for c in commands]
    return [
        "usr/bin/hostkeyctl",
        *UNITS,
        "usr/share/bash-completion/completions/hostkeyctl",
        "usr/share/fish/vendor_completions.d/hostkeyctl.fish",
        *man,
    ]


def package(kind, path, listing, zsh, expected):
    names = {re.sub(r"^\./|^/", "", line.split()[-1]) for line in listing.splitlines() if line.strip()}
    missing = [f for f in [*expected, zsh] if f not in names]
    check(
        not missing,
        f"{path.name} ({kind}) holds the binary, units, completions and "
        f"{len([f for f in expected if '/man1/' in f])} man pages (missing {missing})",
    )


def packages(admin):
    expected = expected_files(admin)
    deb = DIST / f"hostkeyctl_{version()}-1_amd64.deb"
    rpm = DIST / f"hostkeyctl-{version()}-1.x86_64.rpm"
    package(
        "dpkg-deb -c",
        deb,
        run(["dpkg-deb", "-c", str(deb)]).stdout,
        "usr/share/zsh/vendor-completions/_hostkeyctl",
        expected,
    )
    package(
        "rpm -qlp", rpm, run(["rpm", "-qlp", str(rpm)]).stdout, "usr/share/zsh/site-functions/_hostkeyctl", expected
    )
    arch = run(["dpkg-deb", "-f", str(deb), "Architecture"]).stdout.strip()
    check(arch == "amd64", f"{deb.name} is for amd64 (says {arch})")
    depends = run(["dpkg-deb", "-f", str(deb), "Depends"]).stdout.strip()
    check(depends == "libc6 (>= 2.17)", f"{deb.name} depends on libc6 (>= 2.17) (says {depends!r})")
    requires = run(["rpm", "-qp", "--requires", str(rpm)]).stdout.splitlines()
    check("glibc >= 2.17" in requires, f"{rpm.name} requires glibc >= 2.17 (says {requires})")
    binary = [
        line for line in run(["rpm", "-qlvp", str(rpm)]).stdout.splitlines() if line.endswith(" /usr/bin/hostkeyctl")
    ]
    check(
        len(binary) == 1 and binary[0].split()[0] == "-rwxr-xr-x" and binary[0].split()[2:4] == ["root", "root"],
        f"{rpm.name}'s /usr/bin/hostkeyctl is root's, mode 0755 ({binary})",
    )
    with tempfile.TemporaryDirectory() as tmp:
        run(["dpkg-deb", "-x", str(deb), tmp])
        run(["dpkg-deb", "-e", str(deb), f"{tmp}/DEBIAN"])
        sums = subprocess.run(
            ["md5sum", "--check", "--quiet", "DEBIAN/md5sums"], cwd=tmp, capture_output=True, text=True
        )
        check(sums.returncode == 0, f"{deb.name}'s md5sums match its files {sums.stdout.strip()}")
        for inside, source in UNITS.items():
            same = (Path(tmp) / inside).read_bytes() == (ROOT / source).read_bytes()
            check(same, f"{deb.name}'s {inside} is {source} byte for byte")
        same = (Path(tmp) / "usr/bin/hostkeyctl").read_bytes() == admin.read_bytes()
        check(same, f"{deb.name}'s usr/bin/hostkeyctl is {admin.name}")


LAMBDA_ARCH = {"x86_64": "x86_64", "arm64": "aarch64"}
LAMBDA_MAX_ZIPPED = 50 * 1000 * 1000
LAMBDA_MAX_UNZIPPED = 250 * 1000 * 1000
AL2023_GLIBC = (2, 34)


def lambda_zip(name, admin):
    import zipfile

    path = DIST / f"hostkeyctl-lambda-{name}.zip"
    arch = LAMBDA_ARCH[name]
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        check([i.filename for i in infos] == ["bootstrap"], f"{path.name} holds bootstrap alone")
        mode = (infos[0].external_attr >> 16) & 0o777
        check(mode == 0o755, f"{path.name}: bootstrap is mode {oct(mode)} (0755)")
        data = z.read("bootstrap")
    zipped, unzipped = path.stat().st_size, len(data)
    check(
        zipped <= LAMBDA_MAX_ZIPPED and unzipped <= LAMBDA_MAX_UNZIPPED,
        f"{path.name} is {zipped / 1e6:.2f} MB zipped, {unzipped / 1e6:.2f} MB unzipped (Lambda: 50, 250)",
    )
    with tempfile.TemporaryDirectory() as tmp:
        bootstrap = Path(tmp) / "bootstrap"
        bootstrap.write_bytes(data)
        bootstrap.chmod(0o755)
        machine = int.from_bytes(data[18:20], "little")
        check(data[:4] == b"\x7fELF" and machine == ELF_MACHINE[arch], f"{path.name}: bootstrap is an ELF for {arch}")
        needed = glibc_needed(bootstrap)
        shown = ".".join(map(str, needed)) if needed else "none"
        check(
            needed is not None and needed <= AL2023_GLIBC,
            f"{path.name}: bootstrap needs GLIBC_{shown} (provided.al2023 has 2.34)",
        )
        if arch == "x86_64":
            check(data == admin.read_bytes(), f"{path.name}: bootstrap is {admin.name}")
        prefix = QEMU if arch == "aarch64" else []
        outside = run([*prefix, str(bootstrap)], env={"PATH": "/usr/bin:/bin"})
        check(
            outside.returncode == 2 and "AWS_LAMBDA_RUNTIME_API is not set" in outside.stderr,
            f"{path.name}: bootstrap outside Lambda exits 2 saying why "
            f"({outside.returncode}: {outside.stderr.strip()[:80]})",
        )


def main():
    if not (DIST / "SHA256SUMS").is_file():
        sys.exit("check_dist: dist/SHA256SUMS is missing: run `make dist` first")
    sums()
    for arch in ELF_MACHINE:
        node(arch)
    admin = DIST / "hostkeyctl-admin-x86_64"
    binary(admin, "x86_64")
    # make test builds the x86_64 zip alone; the release's arm64 job checks
    # its own (scripts/release-arm64.sh). Whichever is here is checked.
    check((DIST / "hostkeyctl-lambda-x86_64.zip").is_file(), "dist/hostkeyctl-lambda-x86_64.zip exists")
    for name in LAMBDA_ARCH:
        if (DIST / f"hostkeyctl-lambda-{name}.zip").is_file():
            lambda_zip(name, admin)
    node_tree()
    packages(admin)
    if failures:
        sys.exit(f"check_dist: {len(failures)} check(s) failed")
    print("check_dist: all checks passed")


if __name__ == "__main__":
    main()
