#!/usr/bin/env python3
"""Builds cloudformation/hostkeyctl.json from the sources it must not drift
from: the policies in iam/ and the three SSM documents `hostkeyctl
ssm-document print` writes (install, `--kind check`, `--kind converge`).

    python3 scripts/cloudformation.py <(hostkeyctl ssm-document print) \
        <(hostkeyctl ssm-document print --kind check) \
        <(hostkeyctl ssm-document print --kind converge) > cloudformation/hostkeyctl.json

With AssociationSecretArn set, the stack also creates the State Manager
association of the converge document on the AssociationTargetTag* targets,
as `hostkeyctl association deploy` does; with AlarmNamespace set, two
CloudWatch alarms on `audit --cloudwatch NAMESPACE`'s metrics: a node not OK,
and an audit that stopped reporting (docs/operations.md); with
RotationSecretArn set, Secrets Manager's rotation schedule on that secret:
the function (the `bootstrap` zip from RotationCodeBucket/RotationCodeKey),
its role, the permission for secretsmanager.amazonaws.com, and the
RotationSchedule (docs/rotation.md, "Scheduled rotation"); with AdmissionArgs
set, the admission function and the EventBridge rules that run it
(scripts/cloudformation_admission.py, docs/admission.md); with
EnrolmentCluster set, the enrolment signer and its bindings table
(scripts/cloudformation_enrolment.py, docs/cluster-trust.md).

The policies' example account (111122223333) becomes the stack's account
and their `hostkeys/` secret prefix the SecretNamePrefix parameter.
`tests/it/bed/ssm_document.rs` checks that the committed template is this
script's output.
"""

import json
import sys
from pathlib import Path

import cloudformation_admission
import cloudformation_enrolment
from cloudformation_lambda import lambda_function, lambda_role

ROOT = Path(__file__).resolve().parent.parent
ROLES = {
    "admin": "set up and push: init, status, push, ssm-document deploy, known-hosts, ca init",
    "rotation": "rotate (push or pull fleets)",
    "node": "hostkeyctl install on the login nodes",
    "auditor": (
        "audit: public fingerprints only, never a private key; audit --via-ssm runs only the read-only check document"
    ),
    "signer": "sign: host certificates with the CA (the only role that reads it, besides rotate)",
    "rotation-lambda": "the scheduled rotation's Lambda function (what rotate does, from inside Lambda)",
    "admission": "admit: register and deregister the login target group's targets, public fingerprints only",
    "enrolment": "the enrolment signer's Lambda function: certificates for cluster nodes' own keys, through the KMS CA",
    "cluster-node": "hostkeyctl enroll on controller and compute nodes: invoke the enrolment signer, nothing else",
}


def substitute(value):
    if isinstance(value, str) and any(
        s in value
        for s in (
            "111122223333",
            "hostkeys/",
            "hostkeyctl-ca/",
            "targetgroup/my-cluster-login/",
            "autoScalingGroupName/my-cluster-login",
            "hostkeyctl-enrolment-hostkeyctl-my-cluster",
        )
    ):
        return {
            "Fn::Sub": value.replace("111122223333", "${AWS::AccountId}")
            .replace("hostkeys/", "${SecretNamePrefix}")
            .replace("hostkeyctl-ca/", "${CaSecretNamePrefix}")
            .replace("targetgroup/my-cluster-login/", "targetgroup/${AdmissionTargetGroupName}/")
            .replace("autoScalingGroupName/my-cluster-login", "autoScalingGroupName/${AdmissionAutoScalingGroupName}")
            # Each stack's nodes reach its own signer, and its signer its own table.
            .replace("hostkeyctl-enrolment-hostkeyctl-my-cluster", "hostkeyctl-enrolment-${AWS::StackName}")
        }
    if isinstance(value, list):
        return [substitute(v) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v) for k, v in value.items()}
    return value


def document(name: str, path: str) -> dict:
    return {
        "Type": "AWS::SSM::Document",
        "Properties": {
            "Name": name,
            "DocumentType": "Command",
            "DocumentFormat": "JSON",
            "UpdateMethod": "NewVersion",
            "Content": json.loads(Path(path).read_text()),
        },
    }


def alarm(description: str, properties: dict) -> dict:
    """An alarm on the audit's metrics in AlarmNamespace, notifying
    AlarmTopicArn when given."""
    actions = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
    return {
        "Type": "AWS::CloudWatch::Alarm",
        "Condition": "CreateAlarms",
        "Properties": {
            "AlarmDescription": description,
            "Namespace": {"Ref": "AlarmNamespace"},
            "AlarmActions": actions,
            "OKActions": actions,
            **properties,
        },
    }


ROTATION_PARAMETERS = {
    "RotationSecretArn": {
        "Type": "String",
        "Default": "",
        "AllowedPattern": "^$|^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$",
        "Description": (
            "The key set secret to rotate on a schedule (docs/rotation.md, 'Scheduled rotation'): the function "
            "rotates this one secret alone (HOSTKEYCTL_SECRET_ARN), and its role reaches no other. Empty: no "
            "rotation function or schedule."
        ),
    },
    "RotationCodeBucket": {
        "Type": "String",
        "Default": "hostkeyctl-lambda-code",
        "AllowedPattern": "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
        "Description": (
            "The S3 bucket (in the stack's region) holding the function's zip, hostkeyctl-lambda-ARCH.zip from "
            "make dist; the rotation, admission and enrolment functions run it."
        ),
    },
    "RotationCodeKey": {
        "Type": "String",
        "Default": "hostkeyctl-lambda-arm64.zip",
        "Description": "The zip's key in that bucket.",
    },
    "RotationArchitecture": {
        "Type": "String",
        "Default": "arm64",
        "AllowedValues": ["arm64", "x86_64"],
        "Description": "The zip's architecture.",
    },
    "RotationScheduleExpression": {
        "Type": "String",
        "Default": "rate(30 days)",
        "AllowedPattern": "^(rate|cron)\\(.+\\)$",
        "Description": (
            "How often a rotation promotes the announced set: clients that log in at least once in this "
            "period never see a warning. At most every 4 hours."
        ),
    },
    "RotationArgs": {
        "Type": "String",
        "Default": '["--pull", "--target", "tag:Role=login"]',
        "Description": (
            "`hostkeyctl rotate`'s options for the function, as a JSON array (HOSTKEYCTL_ROTATE_ARGS): --pull for "
            "a fleet whose nodes' timers follow the stages (HyperPod), or --target ... without it for a fleet "
            "SSM reaches. Before each promotion the function asks every node by handshake whether it serves "
            "the announced set, so it needs RotationSubnetIds to reach the nodes' sshd; a pull fleet it cannot "
            "reach takes --trust-timers."
        ),
    },
    "RotationSubnetIds": {
        "Type": "CommaDelimitedList",
        "Default": "",
        "Description": (
            "Subnets for the function, from which it reaches the nodes' sshd (each promotion asks every node). "
            "Empty: no VPC (a pull fleet with --trust-timers)."
        ),
    },
    "RotationSecurityGroupIds": {
        "Type": "CommaDelimitedList",
        "Default": "",
        "Description": "Security groups for the function in the VPC: outbound SSH to the login nodes.",
    },
}


def scoped_to_rotated_secret(value):
    """iam/rotation-lambda.json with its key set statements on the one
    secret the function rotates (RotationSecretArn), not on every key set:
    one fleet's function cannot read or move another's."""
    if value == "arn:aws:secretsmanager:*:111122223333:secret:hostkeys/*":
        return {"Ref": "RotationSecretArn"}
    if isinstance(value, list):
        return [scoped_to_rotated_secret(v) for v in value]
    if isinstance(value, dict):
        return {k: scoped_to_rotated_secret(v) for k, v in value.items()}
    return value


def rotation_resources() -> dict:
    """The scheduled rotation: role, its policy, function, invoke
    permission, schedule."""
    policy = json.loads((ROOT / "iam" / "rotation-lambda.json").read_text())
    return {
        "RotationFunctionPolicy": {
            "Type": "AWS::IAM::ManagedPolicy",
            "Condition": "CreateRotation",
            "Properties": {
                "Description": (
                    "hostkeyctl rotation function: iam/rotation-lambda.json on the one secret it rotates "
                    "(RotationSecretArn)"
                ),
                "PolicyDocument": substitute(scoped_to_rotated_secret(policy)),
            },
        },
        "RotationFunctionRole": lambda_role(
            "CreateRotation",
            "hostkeyctl's scheduled rotation function (iam/rotation-lambda.json)",
            "RotationFunctionPolicy",
            "RotationInVpc",
        ),
        "RotationFunction": lambda_function(
            "CreateRotation",
            "rotation",
            "hostkeyctl: Secrets Manager's rotation steps for an SSH host key set",
            900,
            {
                "HOSTKEYCTL_SECRET_ARN": {"Ref": "RotationSecretArn"},
                "HOSTKEYCTL_ROTATE_ARGS": {"Ref": "RotationArgs"},
            },
            vpc="Rotation",
        ),
        "RotationPermission": {
            "Type": "AWS::Lambda::Permission",
            "Condition": "CreateRotation",
            "Properties": {
                "Action": "lambda:InvokeFunction",
                "FunctionName": {"Ref": "RotationFunction"},
                "Principal": "secretsmanager.amazonaws.com",
                "SourceArn": {"Ref": "RotationSecretArn"},
            },
        },
        "RotationSchedule": {
            "Type": "AWS::SecretsManager::RotationSchedule",
            "Condition": "CreateRotation",
            "DependsOn": "RotationPermission",
            "Properties": {
                "SecretId": {"Ref": "RotationSecretArn"},
                "RotationLambdaARN": {"Fn::GetAtt": ["RotationFunction", "Arn"]},
                "RotationRules": {"ScheduleExpression": {"Ref": "RotationScheduleExpression"}},
                "RotateImmediatelyOnUpdate": False,
            },
        },
    }


# The template's parameters, the rotation's in their place among them.
PARAMETERS = {
    "SecretNamePrefix": {
        "Type": "String",
        "Default": "hostkeys/",
        "AllowedPattern": "^[A-Za-z0-9/_+=.@-]+$",
        "Description": "The policies cover secrets whose name starts with this prefix.",
    },
    "CaSecretNamePrefix": {
        "Type": "String",
        "Default": "hostkeyctl-ca/",
        "AllowedPattern": "^[A-Za-z0-9/_+=.@-]+$",
        "Description": (
            "Host certificate CA secrets (docs/certificates.md): a prefix of their own, so the node role, "
            "which reads the key sets, can never read a CA."
        ),
    },
    "AdmissionTargetGroupName": {
        "Type": "String",
        "Default": "my-cluster-login",
        "AllowedPattern": "^[A-Za-z0-9](?:[A-Za-z0-9-]{0,30}[A-Za-z0-9])?$",
        "Description": (
            "The login nodes' target group (its name): the only one the admission policy may register "
            "targets in and deregister them from (docs/admission.md)."
        ),
    },
    "AdmissionAutoScalingGroupName": {
        "Type": "String",
        "Default": "my-cluster-login",
        "AllowedPattern": "^[A-Za-z0-9 _.:/+=@-]{1,255}$",
        "Description": (
            "The login nodes' Auto Scaling group: the only one whose launch lifecycle hook the admission policy "
            "may complete (docs/admission.md)."
        ),
    },
    "AssociationSecretArn": {
        "Type": "String",
        "Default": "",
        "AllowedPattern": "^$|^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$",
        "Description": (
            "The key set secret's ARN (hostkeyctl init prints it): when set, the stack creates a State "
            "Manager association that keeps the tagged login nodes converged to its stages and converges "
            "every new one as it comes online. Empty: no association."
        ),
    },
    "AssociationTargetTagKey": {
        "Type": "String",
        "Default": "Role",
        "AllowedPattern": "^[A-Za-z0-9 _.:/=+@-]{1,128}$",
        "Description": "The association runs on instances with this tag (an Auto Scaling group's).",
    },
    "AssociationTargetTagValue": {
        "Type": "String",
        "Default": "login",
        "AllowedPattern": "^[A-Za-z0-9 _.:/=+@-]{1,256}$",
        "Description": "The tag's value.",
    },
    "AlarmNamespace": {
        "Type": "String",
        "Default": "",
        "AllowedPattern": "^$|^hostkeyctl[A-Za-z0-9._/#:-]{0,245}$",
        "Description": (
            "The namespace a scheduled `hostkeyctl audit --cloudwatch NAMESPACE` publishes to (it starts "
            "with hostkeyctl, as the auditor policy allows): when set, the stack creates an alarm on a node "
            "not OK and one on an audit that stopped reporting. Empty: no alarms."
        ),
    },
    "AlarmTopicArn": {
        "Type": "String",
        "Default": "",
        "AllowedPattern": "^$|^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$",
        "Description": "An SNS topic the alarms notify (alarm and OK); empty for none.",
    },
    "AuditPeriodSeconds": {
        "Type": "Number",
        "Default": 900,
        "AllowedValues": [300, 600, 900, 1800, 3600],
        "Description": "How often the scheduled audit runs (docs/audit.md): each alarm period.",
    },
    **ROTATION_PARAMETERS,
    **cloudformation_admission.PARAMETERS,
    **cloudformation_enrolment.PARAMETERS,
    "AssociationSchedule": {
        "Type": "String",
        "Default": "rate(30 minutes)",
        "Description": "How often the association runs besides when an instance comes online.",
    },
}


def fleet_resources(install: str, check: str, converge: str) -> dict:
    """The SSM documents (from the files `hostkeyctl ssm-document print`
    wrote: install, check, converge), the audit's alarms and the converge
    association."""
    return {
        "InstallDocument": document("hostkeyctl-Install", install),
        "CheckDocument": document("hostkeyctl-Check", check),
        "ConvergeDocument": document("hostkeyctl-Converge", converge),
        "NodesNotOkAlarm": alarm(
            "A scheduled hostkeyctl audit found at least one login node not serving the canonical host keys "
            "(mismatch, missing, unmanaged, unreachable or penalized): docs/operations.md, 'NodesNotOk'.",
            {
                "MetricName": "NodesNotOk",
                "Statistic": "Maximum",
                "Period": {"Ref": "AuditPeriodSeconds"},
                "EvaluationPeriods": 1,
                "Threshold": 1,
                "ComparisonOperator": "GreaterThanOrEqualToThreshold",
                "TreatMissingData": "notBreaching",
            },
        ),
        "AuditStoppedAlarm": alarm(
            "No hostkeyctl audit reported for two audit periods: the scheduled audit stopped running or cannot "
            "publish (missing data is breaching): docs/operations.md, 'AuditStopped'.",
            {
                "MetricName": "NodesNotOk",
                "Statistic": "SampleCount",
                "Period": {"Ref": "AuditPeriodSeconds"},
                "EvaluationPeriods": 2,
                "Threshold": 1,
                "ComparisonOperator": "LessThanThreshold",
                "TreatMissingData": "breaching",
            },
        ),
        "ConvergeAssociation": {
            "Type": "AWS::SSM::Association",
            "Condition": "CreateAssociation",
            "Properties": {
                "AssociationName": {"Fn::Sub": "hostkeyctl-${AWS::StackName}"},
                "Name": {"Ref": "ConvergeDocument"},
                "Parameters": {"SecretId": [{"Ref": "AssociationSecretArn"}]},
                "Targets": [
                    {
                        "Key": {"Fn::Sub": "tag:${AssociationTargetTagKey}"},
                        "Values": [{"Ref": "AssociationTargetTagValue"}],
                    }
                ],
                "ScheduleExpression": {"Ref": "AssociationSchedule"},
                "MaxConcurrency": "10%",
                "MaxErrors": "10%",
                "ComplianceSeverity": "HIGH",
                "SyncCompliance": "AUTO",
            },
        },
    }


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    resources = fleet_resources(sys.argv[1], sys.argv[2], sys.argv[3])
    resources.update(rotation_resources())
    resources.update(cloudformation_admission.resources())
    resources.update(cloudformation_enrolment.resources())
    outputs = {
        "RotationFunctionArn": {
            "Condition": "CreateRotation",
            "Value": {"Fn::GetAtt": ["RotationFunction", "Arn"]},
        },
        "AdmissionFunctionArn": {
            "Condition": "CreateAdmission",
            "Value": {"Fn::GetAtt": ["AdmissionFunction", "Arn"]},
        },
        **cloudformation_enrolment.OUTPUTS,
        "InstallDocumentName": {"Value": {"Ref": "InstallDocument"}},
        "CheckDocumentName": {"Value": {"Ref": "CheckDocument"}},
        "ConvergeDocumentName": {"Value": {"Ref": "ConvergeDocument"}},
        "ConvergeAssociationId": {
            "Condition": "CreateAssociation",
            "Value": {"Fn::GetAtt": ["ConvergeAssociation", "AssociationId"]},
        },
    }
    for role, purpose in ROLES.items():
        policy = json.loads((ROOT / "iam" / f"{role}.json").read_text())
        name = "".join(part.capitalize() for part in role.split("-")) + "Policy"
        resources[name] = {
            "Type": "AWS::IAM::ManagedPolicy",
            "Properties": {
                "Description": f"hostkeyctl {role}: {purpose} (iam/{role}.json)",
                "PolicyDocument": substitute(policy),
            },
        }
        outputs[name] = {"Value": {"Ref": name}}
    template = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": (
            "hostkeyctl: its SSM documents (hostkeyctl install of a pushed version, the read-only "
            "hostkeyctl install --check, and hostkeyctl install of what the stages say for a State Manager "
            "association), optionally that association, alarms, a scheduled rotation, an admission function and an "
            "enrolment signer, and least-privilege managed "
            "policies for the admin, rotation, node, auditor, signer and rotation function roles. Generated by "
            "scripts/cloudformation.py from iam/*.json and `hostkeyctl ssm-document print`; do not edit by hand."
        ),
        "Parameters": PARAMETERS,
        "Conditions": {
            "CreateAssociation": {"Fn::Not": [{"Fn::Equals": [{"Ref": "AssociationSecretArn"}, ""]}]},
            "CreateAlarms": {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmNamespace"}, ""]}]},
            "HasAlarmTopic": {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]},
            "CreateRotation": {"Fn::Not": [{"Fn::Equals": [{"Ref": "RotationSecretArn"}, ""]}]},
            **cloudformation_admission.CONDITIONS,
            **cloudformation_enrolment.CONDITIONS,
            "RotationInVpc": {
                "Fn::And": [
                    {"Condition": "CreateRotation"},
                    {"Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": "RotationSubnetIds"}]}, ""]}]},
                ]
            },
        },
        "Resources": resources,
        "Outputs": outputs,
    }
    json.dump(template, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
