"""EC2's reserved tag prefix, which moto 5.2.1 does not enforce (its
``CreateTags`` takes any key).

Modelled from the EC2 API Reference, ``Tag``: a key "may not begin with
``aws:``". The prefix is AWS's own: EC2 Auto Scaling writes
``aws:autoscaling:groupName`` on the instances of a group, and
CloudFormation its ``aws:cloudformation:*`` tags; a caller cannot create,
change or delete such a tag. EC2 answers ``InvalidParameterValue``, "Value
( aws:autoscaling:groupName ) for parameter key is invalid. Tag keys
starting with 'aws:' are reserved for internal use" (AWS's answer as quoted
in github.com/andrewfarley/aws-automated-daily-instance-ami-snapshots
#7). The enrolment signer's Auto Scaling membership rests on this rule
(docs/cluster-trust.md).

Auto Scaling's own tagging goes through moto's backend, not this API, and
is unaffected.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from .errors import ApiError

# The actions that take tags, and where the keys are in their query form.
_TAGGING = ("CreateTags", "DeleteTags", "RunInstances", "CreateLaunchTemplate")


def check_tags(action: str, body: bytes) -> None:
    """Refuses a tag key in the ``aws:`` namespace, as EC2 does."""
    if action not in _TAGGING:
        return
    form = parse_qs(body.decode("utf-8", "replace"))
    for name, values in form.items():
        if not name.endswith(".Key"):
            continue
        for key in values:
            if key.startswith("aws:"):
                raise ApiError(
                    "InvalidParameterValue",
                    f"Value ( {key} ) for parameter key is invalid. "
                    "Tag keys starting with 'aws:' are reserved for internal use",
                    400,
                )
