#!/usr/bin/env python3
"""Lints the IAM policies in iam/ with parliament; exits 1 on any finding.

One finding is waived, explicitly: parliament 1.6.4's IAM data lists only
`document` resources for ssm:SendCommand, while AWS's Service Authorization
Reference also lists EC2 `instance` (what restricts which nodes a role may
send to). A RESOURCE_MISMATCH for ssm:SendCommand is waived only for a
statement whose every resource is an EC2 instance ARN and which carries an
`ssm:resourceTag/...` condition; anything else fails.
"""

import json
import sys
from pathlib import Path

from parliament import analyze_policy_string


def waived(finding, policy: dict) -> bool:
    if finding.issue != "RESOURCE_MISMATCH":
        return False
    if any(d.get("action") != "ssm:SendCommand" for d in finding.detail):
        return False
    for statement in policy["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if "ssm:SendCommand" not in actions:
            continue
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        if all(r.startswith("arn:aws:ssm:") for r in resources):
            continue
        tag_condition = any(
            key.startswith("ssm:resourceTag/") for keys in statement.get("Condition", {}).values() for key in keys
        )
        if not (tag_condition and all(r.startswith("arn:aws:ec2:") and ":instance/" in r for r in resources)):
            return False
    return True


def main() -> int:
    root = Path(__file__).resolve().parent.parent / "iam"
    failed = False
    files = sorted(root.glob("*.json"))
    if not files:
        print(f"no policies in {root}", file=sys.stderr)
        return 1
    for path in files:
        text = path.read_text()
        policy = json.loads(text)
        for finding in analyze_policy_string(text, filepath=str(path)).findings:
            if waived(finding, policy):
                continue
            failed = True
            print(f"{path.name}: {finding.severity} {finding.issue}: {finding.title} {finding.detail}")
    print(f"parliament: {len(files)} policies, {'findings above' if failed else 'clean'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
