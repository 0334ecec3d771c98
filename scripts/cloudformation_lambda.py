"""What the template's three Lambda functions (the scheduled rotation,
admission, the enrolment signer) share: the execution role each runs as.
"""

# AWS's managed policies for Lambda (basic logging; ENIs in a VPC).
MANAGED = "arn:${AWS::Partition}:iam::aws:policy/service-role/"


def lambda_role(condition: str, description: str, policy: str, in_vpc: str | None = None) -> dict:
    """An execution role Lambda assumes, created under `condition`, with
    the template's managed policy `policy`, CloudWatch Logs, and, when the
    condition `in_vpc` holds, the VPC access a function in a VPC needs."""
    managed: list[object] = [
        {"Ref": policy},
        {"Fn::Sub": MANAGED + "AWSLambdaBasicExecutionRole"},
    ]
    if in_vpc is not None:
        managed.append(
            {
                "Fn::If": [
                    in_vpc,
                    {"Fn::Sub": MANAGED + "AWSLambdaVPCAccessExecutionRole"},
                    {"Ref": "AWS::NoValue"},
                ]
            }
        )
    return {
        "Type": "AWS::IAM::Role",
        "Condition": condition,
        "Properties": {
            "Description": description,
            "AssumeRolePolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            },
            "ManagedPolicyArns": managed,
        },
    }
