#!/usr/bin/env python3
"""The AWS CLI, for the two things the quick starts ask of it on the bed
that the emulator cannot answer over its API (tests/it/bed/quickstart.rs):

* ``aws s3 cp [--recursive] SRC DST``: the lifecycle scripts bucket is a
  directory, ``$HOSTKEYCTL_BED_S3/BUCKET/KEY`` (the AWS CLI reference,
  ``s3 cp``: ``--recursive`` copies every file under a prefix, keeping
  the relative paths; ``--only-show-errors`` and ``--quiet`` print
  nothing on success). S3 has no file modes: every file lands 0644.
* ``aws ssm start-session --target T --document-name
  AWS-StartNonInteractiveCommand --parameters JSON``: a Session Manager
  session to a HyperPod node runs over the Session Manager plugin's
  WebSocket, which no emulator serves. The request is checked against
  botocore's model of ``StartSession`` (the same the CLI uses), the target
  must be ``sagemaker-cluster:CLUSTER-ID_GROUP-INSTANCE-ID`` (SageMaker
  Developer Guide, "Access your SageMaker HyperPod cluster nodes") and
  name a node in ``$HOSTKEYCTL_BED_SESSIONS`` (the test writes it from
  ``DescribeCluster`` and ``ListClusterNodes``), and the document's one
  parameter, ``command``, runs with ``sh -c`` in that node's environment,
  as the session's shell would; the exit status is 0 whatever it did, as
  the Session Manager plugin's.

Anything else exits 2: a quick start step the bed cannot run belongs in a
``sh aws`` block, which scripts/check_quickstarts.py checks instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

ENV_S3 = "HOSTKEYCTL_BED_S3"
ENV_SESSIONS = "HOSTKEYCTL_BED_SESSIONS"


def fail(message: str) -> NoReturn:
    print(f"aws (bed stand-in): {message}", file=sys.stderr)
    sys.exit(2)


def local(uri: str) -> Path:
    """The bed's path of an s3:// URI."""
    if not uri.startswith("s3://") or len(uri) <= len("s3://"):
        fail(f"{uri!r} is not an s3:// URI")
    return Path(os.environ[ENV_S3]) / uri[len("s3://") :].strip("/")


def s3_cp(args: list[str]) -> None:
    recursive = False
    paths: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == "--recursive":
            recursive = True
        elif arg in ("--only-show-errors", "--quiet", "--no-progress"):
            pass
        elif arg == "--region":
            skip = i + 1 < len(args)
        elif arg.startswith("--"):
            fail(f"s3 cp {arg} is not modelled")
        else:
            paths.append(arg)
    if len(paths) != 2:
        fail(f"s3 cp takes a source and a destination, not {paths}")
    source, dest = paths
    files: list[tuple[Path, str]] = []
    src = local(source) if source.startswith("s3://") else Path(source)
    if recursive:
        if not src.is_dir():
            fail(f"{source}: no such prefix or directory")
        files = [(p, str(p.relative_to(src))) for p in sorted(src.rglob("*")) if p.is_file()]
    else:
        if not src.is_file():
            fail(f"{source}: no such key or file")
        files = [(src, "")]
    base = local(dest) if dest.startswith("s3://") else Path(dest)
    for path, relative in files:
        target = base / relative if relative else base
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        target.chmod(0o644)


def start_session(args: list[str]) -> None:
    import botocore.session
    from botocore.validate import ParamValidator

    options: dict[str, str] = {}
    it = iter(args)
    for arg in it:
        if not arg.startswith("--"):
            fail(f"ssm start-session: unexpected {arg!r}")
        value = next(it, None)
        if value is None:
            fail(f"ssm start-session: {arg} needs a value")
        options[arg[2:]] = str(value)
    unknown = set(options) - {"target", "document-name", "parameters", "region", "reason"}
    if unknown:
        fail(f"ssm start-session: {sorted(unknown)} not modelled")
    try:
        parameters = json.loads(options.get("parameters", "{}"))
    except json.JSONDecodeError as e:
        fail(f"--parameters is not JSON: {e}")
    request = {"Target": options.get("target", ""), "Parameters": parameters}
    if "document-name" in options:
        request["DocumentName"] = options["document-name"]
    model = botocore.session.get_session().get_service_model("ssm").operation_model("StartSession")
    report = ParamValidator().validate(request, model.input_shape)
    if report.has_errors():
        fail(f"StartSession's parameters: {report.generate_report()}")
    if options.get("document-name") != "AWS-StartNonInteractiveCommand":
        fail("only AWS-StartNonInteractiveCommand sessions run on the bed")
    commands = parameters.get("command")
    if not (isinstance(commands, list) and len(commands) == 1):
        fail("AWS-StartNonInteractiveCommand takes one command")
    nodes = json.loads(Path(os.environ[ENV_SESSIONS]).read_text())
    node = nodes.get(request["Target"])
    if node is None:
        fail(f"TargetNotConnected: {request['Target']} is no node of the bed's cluster")
    env = {"PATH": node["path"], **node["env"]}
    subprocess.run(["sh", "-c", commands[0]], env=env, check=False)
    # The Session Manager plugin exits 0 whatever the command's status
    # (aws/session-manager-plugin issue 59): so does this. The command's
    # last line says it (hostkeyctl sessions' marker).
    sys.exit(0)


def main() -> None:
    args = sys.argv[1:]
    if args[:2] == ["s3", "cp"]:
        s3_cp(args[2:])
    elif args[:2] == ["ssm", "start-session"]:
        start_session(args[2:])
    else:
        fail(f"`aws {' '.join(args[:2])}` is not modelled on the bed: put it in a `sh aws` block")


if __name__ == "__main__":
    main()
