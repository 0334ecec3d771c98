"""The admission function's part of cloudformation/hostkeyctl.json
(docs/admission.md, "Where it runs"): with AdmissionArgs set, the
`bootstrap` of the rotation's zip configured as the admission function
(HOSTKEYCTL_FUNCTION=admission), its role (iam/admission.json through the
template's AdmissionPolicy), and the EventBridge rules that run it: a
schedule, Auto Scaling's launch lifecycle actions of the login group, and,
with AdmissionHyperPodClusterArn, the HyperPod cluster's events. An event
only triggers a run: the function takes nothing from it."""

from cloudformation_lambda import lambda_function, lambda_role

PARAMETERS = {
    "AdmissionArgs": {
        "Type": "String",
        "Default": "",
        "Description": (
            "`hostkeyctl admit`'s options for the admission function, as a JSON array (HOSTKEYCTL_ADMIT_ARGS), "
            'e.g. ["--secret-id", "hostkeys/my-cluster", "--target", "hyperpod:my-cluster/login-group", '
            '"--target-group", "lb:my-cluster-login"]. Empty: no admission function.'
        ),
    },
    "AdmissionSchedule": {
        "Type": "String",
        "Default": "rate(5 minutes)",
        "AllowedPattern": "^(rate|cron)\\(.+\\)$",
        "Description": "How often the admission function runs besides on events.",
    },
    "AdmissionHyperPodClusterArn": {
        "Type": "String",
        "Default": "",
        "AllowedPattern": "^$|^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:cluster/[a-z0-9]+$",
        "Description": "A HyperPod cluster whose events (node replaced, health) also run the function; empty: none.",
    },
    "AdmissionSubnetIds": {
        "Type": "CommaDelimitedList",
        "Default": "",
        "Description": "Subnets from which the function reaches the nodes' sshd (it admits by handshake).",
    },
    "AdmissionSecurityGroupIds": {
        "Type": "CommaDelimitedList",
        "Default": "",
        "Description": "Security groups for the function: outbound SSH to the login nodes.",
    },
}

CONDITIONS = {
    "CreateAdmission": {"Fn::Not": [{"Fn::Equals": [{"Ref": "AdmissionArgs"}, ""]}]},
    "AdmissionInVpc": {
        "Fn::And": [
            {"Condition": "CreateAdmission"},
            {"Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": "AdmissionSubnetIds"}]}, ""]}]},
        ]
    },
    "AdmissionOnHyperPod": {
        "Fn::And": [
            {"Condition": "CreateAdmission"},
            {"Fn::Not": [{"Fn::Equals": [{"Ref": "AdmissionHyperPodClusterArn"}, ""]}]},
        ]
    },
}


def rule(condition: str, description: str, trigger: dict) -> dict:
    """An EventBridge rule that invokes the admission function."""
    return {
        "Type": "AWS::Events::Rule",
        "Condition": condition,
        "Properties": {
            "Description": description,
            **trigger,
            "Targets": [{"Id": "admission", "Arn": {"Fn::GetAtt": ["AdmissionFunction", "Arn"]}}],
        },
    }


def permission(condition: str, rule_name: str) -> dict:
    """EventBridge may invoke the function for this rule alone."""
    return {
        "Type": "AWS::Lambda::Permission",
        "Condition": condition,
        "Properties": {
            "Action": "lambda:InvokeFunction",
            "FunctionName": {"Ref": "AdmissionFunction"},
            "Principal": "events.amazonaws.com",
            "SourceArn": {"Fn::GetAtt": [rule_name, "Arn"]},
        },
    }


def resources() -> dict:
    """Role, function, rules and their permissions."""
    launch = {
        "EventPattern": {
            "source": ["aws.autoscaling"],
            "detail-type": ["EC2 Instance-launch Lifecycle Action"],
            "detail": {"AutoScalingGroupName": [{"Ref": "AdmissionAutoScalingGroupName"}]},
        }
    }
    hyperpod = {
        "EventPattern": {
            "source": ["aws.sagemaker"],
            "detail-type": ["SageMaker HyperPod Cluster Event", "SageMaker HyperPod Cluster Node Health Event"],
            "resources": [{"Ref": "AdmissionHyperPodClusterArn"}],
        }
    }
    return {
        "AdmissionFunctionRole": lambda_role(
            "CreateAdmission",
            "hostkeyctl's admission function (iam/admission.json)",
            "AdmissionPolicy",
            "AdmissionInVpc",
        ),
        "AdmissionFunction": lambda_function(
            "CreateAdmission",
            "admission",
            "hostkeyctl admit: the load balancer sends users only to nodes serving the set",
            300,
            {"HOSTKEYCTL_FUNCTION": "admission", "HOSTKEYCTL_ADMIT_ARGS": {"Ref": "AdmissionArgs"}},
            reserved=1,
            vpc="Admission",
        ),
        "AdmissionScheduleRule": rule(
            "CreateAdmission",
            "hostkeyctl admit on a schedule",
            {"ScheduleExpression": {"Ref": "AdmissionSchedule"}},
        ),
        "AdmissionSchedulePermission": permission("CreateAdmission", "AdmissionScheduleRule"),
        "AdmissionLaunchRule": rule(
            "CreateAdmission", "hostkeyctl admit on the login group's launch lifecycle actions", launch
        ),
        "AdmissionLaunchPermission": permission("CreateAdmission", "AdmissionLaunchRule"),
        "AdmissionHyperPodRule": rule(
            "AdmissionOnHyperPod", "hostkeyctl admit on the HyperPod cluster's events", hyperpod
        ),
        "AdmissionHyperPodPermission": permission("AdmissionOnHyperPod", "AdmissionHyperPodRule"),
    }
