//! The SDK's configuration (`--region`, `--profile`, the endpoint, retries)
//! and AWS's answers classified into [`AwsError`].

use crate::aws_error::{AwsError, Call};
use crate::aws_options::AwsArgs;
use std::error::Error as StdError;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_secretsmanager::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

/// Loads the SDK configuration: `--profile`, `--region`, `--endpoint-url`
/// over the standard chain (`AWS_*` variables, config files, IAM Identity
/// Center, credential_process, instance roles). Retries use the SDK's
/// adaptive mode (client-side rate limiting on throttling).
pub async fn load_config(args: &AwsArgs) -> Result<aws_config::SdkConfig, AwsError> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(
            RetryConfig::adaptive()
                .with_max_attempts(args.max_attempts.max(1))
                .with_max_backoff(Duration::from_secs(20)),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(5))
                .operation_attempt_timeout(Duration::from_secs(30))
                .build(),
        );
    if let Some(profile) = &args.profile {
        loader = loader.profile_name(profile);
    }
    if let Some(region) = &args.region {
        loader = loader.region(aws_config::Region::new(region.clone()));
    }
    if let Some(url) = &args.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    let config = loader.load().await;
    if config.region().is_none() {
        return Err(AwsError::NoRegion);
    }
    Ok(config)
}

impl AwsError {
    /// Classifies an SDK error for `call`.
    pub fn from_sdk<E, R>(err: SdkError<E, R>, call: &Call) -> AwsError
    where
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        let action = call.action;
        match &err {
            SdkError::ServiceError(service) => {
                let e = service.err();
                let code = e.code().unwrap_or("Unknown").to_owned();
                let message = e.message().unwrap_or("no message").to_owned();
                classify_code(&code, message, call)
            }
            SdkError::TimeoutError(_) => AwsError::Unreachable {
                action,
                detail: "the request timed out".to_owned(),
            },
            SdkError::DispatchFailure(d) if d.is_io() || d.is_timeout() => AwsError::Unreachable {
                action,
                detail: innermost(&err),
            },
            _ => {
                let detail = DisplayErrorContext(&err).to_string();
                let lower = detail.to_ascii_lowercase();
                if lower.contains("no providers in chain provided credentials")
                    || lower.contains("no credentials")
                    || lower.contains("credentials provider was not enabled")
                {
                    AwsError::NoCredentials { action }
                } else if lower.contains("sso") && (lower.contains("expired") || lower.contains("token")) {
                    AwsError::Credentials {
                        action,
                        message: "the IAM Identity Center (SSO) session has expired".to_owned(),
                    }
                } else if detail.contains("credentials") || detail.contains("identity") {
                    AwsError::Credentials {
                        action,
                        message: detail,
                    }
                } else {
                    AwsError::Unreachable {
                        action,
                        detail: innermost(&err),
                    }
                }
            }
        }
    }
}

/// What an SDK failure that reached no service says, in one line: the
/// innermost two causes (the SDK's wrappers before them say only where it
/// failed: "dispatch failure", "io error"), never the SDK's Debug text.
fn innermost(err: &(dyn StdError + 'static)) -> String {
    let mut texts: Vec<String> = Vec::new();
    let mut cause: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cause {
        let text = e.to_string();
        if !text.is_empty() && !texts.iter().any(|t| t.contains(&text)) {
            texts.push(text);
        }
        cause = e.source();
    }
    let from = texts.len().saturating_sub(2);
    texts[from..].join(": ")
}

/// Sorts an AWS error code into the classes above.
pub fn classify_code(code: &str, message: String, call: &Call) -> AwsError {
    let action = call.action;
    let resource = call.resource.clone();
    match code {
        "AccessDeniedException" | "AccessDenied" | "UnauthorizedOperation" | "UnauthorizedAccess" => {
            AwsError::AccessDenied {
                action,
                resource,
                message,
            }
        }
        "UnrecognizedClientException"
        | "InvalidClientTokenId"
        | "ExpiredTokenException"
        | "ExpiredToken"
        | "AuthFailure"
        | "InvalidSignatureException"
        | "SignatureDoesNotMatch" => AwsError::Credentials { action, message },
        "ResourceNotFoundException"
        | "ResourceNotFound"
        | "InvalidInstanceID.NotFound"
        | "InvalidCommandId"
        | "InvalidDocument"
        | "LoadBalancerNotFound"
        | "TargetGroupNotFound" => AwsError::NotFound {
            action,
            resource,
            message,
        },
        "ThrottlingException"
        | "Throttling"
        | "RequestLimitExceeded"
        | "TooManyRequestsException"
        | "ThrottledException" => AwsError::Throttled { action, message },
        "DecryptionFailure"
        | "EncryptionFailure"
        | "KMSAccessDeniedException"
        | "KMSDisabledException"
        | "KMSInvalidStateException"
        | "KMSNotFoundException" => AwsError::Kms {
            action,
            resource,
            message,
        },
        _ => AwsError::Service {
            action,
            resource,
            code: code.to_owned(),
            message,
        },
    }
}

/// The region of an SDK configuration, parsed (it goes on node command
/// lines).
pub fn config_region(config: &aws_config::SdkConfig) -> Result<Option<crate::ids::Region>, crate::ids::IdError> {
    config
        .region()
        .map(|r| crate::ids::Region::parse(r.as_ref()))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::{AwsError, Call, classify_code};

    #[test]
    fn codes_are_classified_and_messages_say_what_to_do() {
        let call = Call::new("secretsmanager:GetSecretValue", "secret hk");
        let denied = classify_code("AccessDeniedException", "no".into(), &call);
        assert!(matches!(denied, AwsError::AccessDenied { .. }));
        assert!(
            denied.to_string().contains("grant secretsmanager:GetSecretValue"),
            "{denied}"
        );
        assert!(matches!(
            classify_code("RequestLimitExceeded", "x".into(), &call),
            AwsError::Throttled { .. }
        ));
        assert!(matches!(
            classify_code("ResourceNotFoundException", "x".into(), &call),
            AwsError::NotFound { .. }
        ));
        assert!(matches!(
            classify_code("DecryptionFailure", "x".into(), &call),
            AwsError::Kms { .. }
        ));
        assert!(matches!(
            classify_code("ExpiredTokenException", "x".into(), &call),
            AwsError::Credentials { .. }
        ));
        let other = classify_code("ValidationException", "bad".into(), &call);
        assert_eq!(other.code(), Some("ValidationException"));
    }
}
