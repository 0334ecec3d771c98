"""The enrolment signer's part of cloudformation/hostkeyctl.json
(docs/cluster-trust.md, "Setting it up"): with EnrolmentCluster set, the
bindings table (DynamoDB, one item per instance), and the `bootstrap` of
the rotation's zip configured as the signer (HOSTKEYCTL_FUNCTION=enrolment)
with its role (iam/enrolment.json through the template's EnrolmentPolicy).
The names are hostkeyctl-enrolment-STACK, as the node and signer policies
grant (each stack's nodes invoke its own signer alone)."""

from cloudformation_lambda import lambda_function, lambda_role

PARAMETERS = {
    "EnrolmentCluster": {
        "Type": "String",
        "Default": "",
        "AllowedPattern": "^$|^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$",
        "Description": (
            "The cluster whose nodes enrol (hostkeyctl enroll, docs/cluster-trust.md): a HyperPod cluster's name, "
            "a ParallelCluster cluster's name, or an EC2 Auto Scaling group's name. "
            "The stack creates the signer function and its bindings table. "
            "Empty: no enrolment."
        ),
    },
    "EnrolmentClusterKind": {
        "Type": "String",
        "Default": "hyperpod",
        "AllowedValues": ["hyperpod", "parallelcluster", "autoscaling"],
        "Description": (
            "How the signer knows the cluster's nodes: HyperPod's DescribeClusterNode, or EC2's "
            "DescribeInstances and the parallelcluster:cluster-name tag, or the aws:autoscaling:groupName tag "
            "Auto Scaling puts on its instances."
        ),
    },
    "EnrolmentCaSecretId": {
        "Type": "String",
        "Default": "hostkeyctl-ca/my-cluster",
        "AllowedPattern": "^hostkeyctl-ca/[A-Za-z0-9/_+=.@-]+$",
        "Description": "The CA secret (`hostkeyctl ca init --kms`), under hostkeyctl-ca/ as the policies grant.",
    },
    "EnrolmentSetSecretId": {
        "Type": "String",
        "Default": "",
        "AllowedPattern": "^$|^[A-Za-z0-9/_+=.@-]+$",
        "Description": (
            "The canonical key set's secret (under SecretNamePrefix): the signer reads its public fingerprints "
            "(DescribeSecret, never the keys) and certifies none of them. Empty: no set to refuse by name."
        ),
    },
    "EnrolmentValidityHours": {
        "Type": "Number",
        "Default": 48,
        "MinValue": 1,
        "MaxValue": 720,
        "Description": (
            "How long a node's certificates are valid. Nodes renew every 15 to 20 minutes; 48 hours outlast a "
            "day-long outage of the signer (docs/cluster-trust.md, 'Performance and quotas')."
        ),
    },
    "EnrolmentFirstWithinHours": {
        "Type": "Number",
        "Default": 1,
        "MinValue": 1,
        "MaxValue": 8784,
        "Description": (
            "How long after an instance's start its first enrolment is accepted. Raise it for a while to "
            "enrol nodes that were running before, then put it back."
        ),
    },
}

CONDITIONS = {"CreateEnrolment": {"Fn::Not": [{"Fn::Equals": [{"Ref": "EnrolmentCluster"}, ""]}]}}

OUTPUTS = {
    "EnrolmentFunctionArn": {
        "Condition": "CreateEnrolment",
        "Value": {"Fn::GetAtt": ["EnrolmentFunction", "Arn"]},
    },
    "EnrolmentTableName": {"Condition": "CreateEnrolment", "Value": {"Ref": "EnrolmentTable"}},
}


def resources() -> dict:
    """The bindings table, the signer's role and function."""
    return {
        "EnrolmentTable": {
            "Type": "AWS::DynamoDB::Table",
            "Condition": "CreateEnrolment",
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": {
                "TableName": {"Fn::Sub": "hostkeyctl-enrolment-${AWS::StackName}"},
                "BillingMode": "PAY_PER_REQUEST",
                "AttributeDefinitions": [{"AttributeName": "instance_id", "AttributeType": "S"}],
                "KeySchema": [{"AttributeName": "instance_id", "KeyType": "HASH"}],
                "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            },
        },
        "EnrolmentFunctionRole": lambda_role(
            "CreateEnrolment",
            "hostkeyctl's enrolment signer (iam/enrolment.json)",
            "EnrolmentPolicy",
        ),
        "EnrolmentFunction": lambda_function(
            "CreateEnrolment",
            "enrolment",
            "hostkeyctl enrolment: host certificates for cluster nodes' own keys",
            30,
            {
                "HOSTKEYCTL_FUNCTION": "enrolment",
                "HOSTKEYCTL_ENROL_CLUSTER": {"Ref": "EnrolmentCluster"},
                "HOSTKEYCTL_ENROL_CLUSTER_KIND": {"Ref": "EnrolmentClusterKind"},
                "HOSTKEYCTL_ENROL_CA_SECRET_ID": {"Ref": "EnrolmentCaSecretId"},
                "HOSTKEYCTL_ENROL_TABLE": {"Ref": "EnrolmentTable"},
                "HOSTKEYCTL_ENROL_SET_SECRET_ID": {"Ref": "EnrolmentSetSecretId"},
                "HOSTKEYCTL_ENROL_VALIDITY_HOURS": {"Ref": "EnrolmentValidityHours"},
                "HOSTKEYCTL_ENROL_FIRST_WITHIN_HOURS": {"Ref": "EnrolmentFirstWithinHours"},
            },
            # Each signing is up to three kms:Sign calls, made one after
            # the other: one environment made 23 a second on the test
            # bed (bench.py enrol), so ten stay under KMS's default ECC
            # quota (300/s, shared with the account's other ECC keys).
            # A node signs at most once in 10 minutes, and a refusal
            # costs no Sign. Lambda throttles the rest; the nodes retry
            # with jitter (docs/cluster-trust.md, "Performance and
            # quotas").
            reserved=10,
        ),
        # Invoke also takes InvocationType=Event: a burst of queued events
        # from a node role would otherwise drain at the reserved concurrency
        # for hours (Lambda keeps events up to 6 h and retries twice). The
        # signer answers nodes synchronously alone: queued events expire in
        # a minute and are never retried (Lambda Developer Guide,
        # "Configuring error handling for asynchronous invocation").
        "EnrolmentFunctionEventInvokeConfig": {
            "Type": "AWS::Lambda::EventInvokeConfig",
            "Condition": "CreateEnrolment",
            "Properties": {
                "FunctionName": {"Ref": "EnrolmentFunction"},
                "Qualifier": "$LATEST",
                "MaximumRetryAttempts": 0,
                "MaximumEventAgeInSeconds": 60,
            },
        },
    }
