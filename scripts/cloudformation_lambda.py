"""What the template's three Lambda functions (the scheduled rotation,
admission, the enrolment signer) share: the execution role each runs as,
and the function itself (one `bootstrap` zip, one runtime, one
architecture, told apart by its environment).
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


def lambda_function(
    condition: str,
    name: str,
    description: str,
    timeout: int,
    variables: dict,
    reserved: int | None = None,
    vpc: str | None = None,
) -> dict:
    """The function `hostkeyctl-NAME-STACK`, created under `condition`,
    running as the role `<Name>FunctionRole` from the stack's one code zip,
    with `variables` for its environment, `reserved` concurrent executions
    if set, and, under the condition `<vpc>InVpc`, the subnets and security
    groups of the parameters `<vpc>SubnetIds` and `<vpc>SecurityGroupIds`."""
    properties: dict[str, object] = {
        "FunctionName": {"Fn::Sub": f"hostkeyctl-{name}-${{AWS::StackName}}"},
        "Description": description,
        "Runtime": "provided.al2023",
        "Handler": "bootstrap",
        "Architectures": [{"Ref": "RotationArchitecture"}],
        "Code": {"S3Bucket": {"Ref": "RotationCodeBucket"}, "S3Key": {"Ref": "RotationCodeKey"}},
        "Role": {"Fn::GetAtt": [f"{name.capitalize()}FunctionRole", "Arn"]},
        "Timeout": timeout,
        "MemorySize": 256,
    }
    if reserved is not None:
        properties["ReservedConcurrentExecutions"] = reserved
    properties["Environment"] = {"Variables": variables}
    if vpc is not None:
        properties["VpcConfig"] = {
            "Fn::If": [
                f"{vpc}InVpc",
                {
                    "SubnetIds": {"Ref": f"{vpc}SubnetIds"},
                    "SecurityGroupIds": {"Ref": f"{vpc}SecurityGroupIds"},
                },
                {"Ref": "AWS::NoValue"},
            ]
        }
    return {"Type": "AWS::Lambda::Function", "Condition": condition, "Properties": properties}
