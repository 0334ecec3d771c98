"""The AWS side: the emulator (``emulator/``: moto and what the bed adds),
served on loopback at a free port, and the IAM users of the shipped
policies, each with an access key of its own."""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING, Any

from .host import HERE
from .state import AccessKey

if TYPE_CHECKING:
    from .context import BedContext

REGION = "us-east-1"
POLICY_DIR = HERE.parent / "iam"


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


def start_emulator(bed: BedContext) -> None:
    """The emulator on 127.0.0.1 at a free port (``bed.endpoint``), with the
    environment its SSM agent gives commands and the control API's node
    operations (run on the supervisor's main thread)."""
    import logging

    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    share_botocore_loader()

    from emulator import Emulator

    bed.emulator = Emulator(REGION, log_dir=str(bed.dir))
    bed.server = make_server("127.0.0.1", 0, bed.emulator, threaded=True)
    bed.endpoint = f"http://127.0.0.1:{bed.server.server_port}"
    threading.Thread(target=bed.server.serve_forever, daemon=True).start()
    if bed.args.bare:
        # systemd's default PATH, the SSM agent's on a real instance:
        # /usr/local/bin is the node's own (ssm.py, _shell).
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    elif bed.args.bin_dir:
        path = f"{bed.args.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    else:
        path = os.environ.get("PATH", "/usr/bin:/bin")
    bed.emulator.bare_nodes = bool(bed.args.bare)
    bed.emulator.s3_root = str(bed.dir / "s3")
    os.makedirs(bed.emulator.s3_root, exist_ok=True)
    bed.emulator.base_env = {
        "PATH": path,
        "HOME": str(bed.dir),
        "LANG": "C.UTF-8",
        "AWS_ENDPOINT_URL": bed.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        # The connection budget's ledger (scan::pacing), the bed's own.
        "HOSTKEYCTL_PACING_DIR": bed.pacing_dir,
    }
    bed.emulator.control_hooks["/_bed/nodes/stop"] = lambda r: bed.on_main("stop", r)
    bed.emulator.control_hooks["/_bed/nodes/start"] = lambda r: bed.on_main("start", r)
    bed.emulator.control_hooks["/_bed/nodes/launch"] = lambda r: bed.on_main("launch", r)
    bed.emulator.replacements.append(lambda group: replace_in_group(bed, group))


def replace_in_group(bed: BedContext, group: str) -> None:
    """Auto Scaling replaces an abandoned instance (emulator/autoscaling.py):
    the bed's next held node not launched yet, launched and attached to
    ``group``; with none left, the group stays short."""
    node = next((n for n in bed.nodes if not n.instance_id), None)
    if node is None:
        return
    bed.on_main("launch", {"name": node.name})
    bed.emulator._asg_launch({"group": group, "instance_id": node.instance_id})


def create_roles(bed: BedContext) -> None:
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
        endpoint_url=bed.endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    credentials: dict[str, AccessKey] = {}
    for role in (*ROLES, BED_ROOT):
        if role == BED_ROOT:
            user, document = BED_ROOT, json.dumps(ALLOW_ALL)
        else:
            user = f"hostkeyctl-{role}"
            document = policy_for_bed((POLICY_DIR / f"{role}.json").read_text(), ACCOUNT, bed.args.cluster)
        client.create_user(UserName=user)
        arn = client.create_policy(PolicyName=user, PolicyDocument=document)["Policy"]["Arn"]
        client.attach_user_policy(UserName=user, PolicyArn=arn)
        key = client.create_access_key(UserName=user)["AccessKey"]
        credentials[role] = {"access_key_id": key["AccessKeyId"], "secret_access_key": key["SecretAccessKey"]}
    bed.state["credentials"] = credentials
    node_key = credentials["node"]
    # Every node (the SSM agent's commands, timers, the lifecycle step)
    # signs with the node role.
    bed.node_credentials = {
        "AWS_ACCESS_KEY_ID": node_key["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": node_key["secret_access_key"],
    }
    bed.emulator.base_env.update(bed.node_credentials)


def ec2(bed: BedContext) -> Any:  # a boto3 client (boto3 has no types)
    """EC2 as the bed's own account (``bed-root``: once IAM is enforced,
    a held node's launch must be signed)."""
    import boto3

    from emulator.iam import BED_ROOT

    root = bed.state.get("credentials", {}).get(BED_ROOT)
    return boto3.client(
        "ec2",
        endpoint_url=bed.endpoint,
        region_name=REGION,
        aws_access_key_id=root["access_key_id"] if root else "testing",
        aws_secret_access_key=root["secret_access_key"] if root else "testing",
    )
