"""Logs in N times with a Python SSH client, as its users' tools do, and
reports how many logins succeeded and why the others failed (JSON on stdout).

    python3 testbed/clients.py paramiko|asyncssh --known-hosts FILE --key KEY
        --host HOST --port PORT --count N [--host-key-alias NAME]

Host keys are checked strictly against FILE alone: Paramiko with
RejectPolicy (what Ansible's paramiko connection and Fabric do with
host_key_checking), AsyncSSH with known_hosts=FILE (and host_key_alias, its
HostKeyAlias, for a certificate's principal). Each login runs `true`.
"""

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, field


@dataclass
class Result:
    """The logins of one run."""

    ok: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, error: Exception | None) -> None:
        if error is None:
            self.ok += 1
        else:
            self.failures.append(f"{type(error).__name__}: {error}")


def paramiko_login(args: argparse.Namespace) -> None:
    import paramiko

    client = paramiko.SSHClient()
    client.load_host_keys(args.known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            args.host,
            port=args.port,
            username="root",
            key_filename=args.key,
            look_for_keys=False,
            allow_agent=False,
            timeout=10,
        )
        _, stdout, _ = client.exec_command("true")
        status = stdout.channel.recv_exit_status()
        if status != 0:
            raise RuntimeError(f"`true` exited {status}")
    finally:
        client.close()


async def asyncssh_login(args: argparse.Namespace) -> None:
    import asyncssh

    async with asyncssh.connect(
        args.host,
        port=args.port,
        username="root",
        client_keys=[args.key],
        known_hosts=args.known_hosts,
        host_key_alias=args.host_key_alias,
        agent_path=None,
        config=[],
        connect_timeout=10,
    ) as conn:
        await conn.run("true", check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("client", choices=["paramiko", "asyncssh"])
    parser.add_argument("--known-hosts", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, default=22)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--host-key-alias", help="AsyncSSH only: check the key as this name")
    args = parser.parse_args()
    if args.host_key_alias and args.client != "asyncssh":
        parser.error("--host-key-alias is for asyncssh (Paramiko has no such option)")

    result = Result()
    for _ in range(args.count):
        try:
            if args.client == "paramiko":
                paramiko_login(args)
            else:
                asyncio.run(asyncssh_login(args))
        except Exception as error:  # noqa: BLE001 (every failure is reported, none ends the run)
            result.add(error)
        else:
            result.add(None)
    json.dump({"ok": result.ok, "failures": result.failures}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
