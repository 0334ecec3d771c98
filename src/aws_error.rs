//! What a call to AWS can answer, for the traits the library owns: the
//! call ([`Call`]: the IAM action and the resource) and its failure,
//! classified ([`AwsError`]: "the service said no" apart from "we could
//! not reach it"). The SDK's errors become these in the AWS room
//! (`crate::aws`, `AwsError::from_sdk`); nothing here knows the SDK.

/// What an AWS call was for, to name it in errors.
#[derive(Clone, Debug)]
pub struct Call {
    /// IAM action, e.g. `secretsmanager:GetSecretValue`.
    pub action: &'static str,
    /// The resource, e.g. the secret id.
    pub resource: String,
}

impl Call {
    /// A call of `action` on `resource`.
    pub fn new(action: &'static str, resource: impl Into<String>) -> Self {
        Call {
            action,
            resource: resource.into(),
        }
    }
}

/// An AWS failure, classified. Each maps to exit code 4.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// No region from options, environment or profile.
    #[error("no AWS region is configured: pass --region, set AWS_REGION, or set `region` in the profile")]
    NoRegion,
    /// The credentials are not allowed to do this.
    #[error(
        "access denied: {action} on {resource}: {message}\n  grant {action} on that resource to the caller's role (docs/iam.md lists each role's policy)"
    )]
    AccessDenied {
        /// IAM action.
        action: &'static str,
        /// Resource.
        resource: String,
        /// What AWS said.
        message: String,
    },
    /// No credentials were found at all.
    #[error(
        "no AWS credentials found for {action}\n  set AWS_PROFILE (or --profile), run `aws sso login`, export AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run where an instance role applies"
    )]
    NoCredentials {
        /// IAM action.
        action: &'static str,
    },
    /// The credentials are missing, invalid or expired.
    #[error(
        "AWS rejected the credentials for {action}: {message}\n  log in again (e.g. `aws sso login --profile NAME`) or check AWS_PROFILE / the instance role"
    )]
    Credentials {
        /// IAM action.
        action: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The named resource does not exist.
    #[error("{resource} was not found ({action}): {message}\n  check the name, the region and the account")]
    NotFound {
        /// IAM action.
        action: &'static str,
        /// Resource.
        resource: String,
        /// What AWS said.
        message: String,
    },
    /// Still throttled after the SDK's retries.
    #[error(
        "AWS throttled {action} and it still failed after the SDK's retries: {message}\n  retry later, lower --max-concurrency, or raise --max-attempts"
    )]
    Throttled {
        /// IAM action.
        action: &'static str,
        /// What AWS said.
        message: String,
    },
    /// KMS refused to encrypt or decrypt the secret.
    #[error(
        "KMS failed for {resource} ({action}): {message}\n  the caller needs kms:Decrypt (reading) or kms:GenerateDataKey (writing) on the secret's KMS key, and the key must be enabled"
    )]
    Kms {
        /// IAM action.
        action: &'static str,
        /// Resource.
        resource: String,
        /// What AWS said.
        message: String,
    },
    /// The service could not be reached or did not answer in time.
    #[error(
        "cannot reach AWS for {action}: {detail}\n  check network access to the service endpoint (VPC endpoint, proxy, --endpoint-url)"
    )]
    Unreachable {
        /// IAM action.
        action: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// Any other refusal from the service.
    #[error("{action} on {resource} failed: {code}: {message}")]
    Service {
        /// IAM action.
        action: &'static str,
        /// Resource.
        resource: String,
        /// AWS error code.
        code: String,
        /// What AWS said.
        message: String,
    },
}

impl AwsError {
    /// The AWS error code of a service error, if this is one.
    pub fn code(&self) -> Option<&str> {
        match self {
            AwsError::Service { code, .. } => Some(code),
            _ => None,
        }
    }
}

impl crate::exit::ExitStatus for AwsError {
    /// A missing region is a configuration error (2); every other AWS
    /// failure is 4.
    fn status(&self) -> crate::exit::Status {
        match self {
            AwsError::NoRegion => crate::exit::Status::Usage,
            _ => crate::exit::Status::Aws,
        }
    }
}
