//! The enrolment signer as a node reaches it: Lambda's Invoke, in the node
//! build too.
//!
//! A signer that is throttled (its reserved concurrency taken: Lambda's
//! `TooManyRequestsException`, HTTP 429) or failing on Lambda's side (5xx)
//! is asked again, with exponential backoff and full jitter (AWS
//! Architecture Blog, "Exponential Backoff And Jitter"), for at most
//! [`RETRY_BUDGET`]: many nodes renewing together then spread out instead
//! of throttling each other again. Nothing is written before an answer
//! comes, so a renewal that never gets one keeps the node's current
//! certificates, valid for days (docs/cluster-trust.md, "Performance and
//! quotas"), and the timer tries again.

use std::time::Duration;

use crate::aws::{AwsError, Call};

/// How long one `enroll` keeps asking a throttled signer: less than the
/// timer's period (15 minutes), so runs never overlap.
pub const RETRY_BUDGET: Duration = Duration::from_secs(180);
/// The first backoff's cap; each retry doubles it, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The largest backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(20);

/// The enrolment signer as a node reaches it: `lambda:InvokeFunction` of
/// the function, RequestResponse ([`crate::enrolment::node::Signer`]).
#[derive(Clone, Debug)]
pub struct LambdaSigner {
    client: aws_sdk_lambda::Client,
    function: String,
}

impl LambdaSigner {
    /// The signer `function` (its ARN: the audience of every proof).
    /// The SDK tries each call twice (a dropped connection); a throttled
    /// signer is this adapter's to ask again, for longer and with jitter
    /// (module documentation).
    pub fn new(config: &aws_config::SdkConfig, function: &str) -> Self {
        let lambda = aws_sdk_lambda::config::Builder::from(config)
            .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(2))
            .build();
        LambdaSigner {
            client: aws_sdk_lambda::Client::from_conf(lambda),
            function: function.to_owned(),
        }
    }
}

/// Whether a failed Invoke is worth asking again: throttled, or Lambda's
/// own trouble. A refusal by the function, a missing function, denied
/// access or an unreachable endpoint are not.
fn again(error: &AwsError) -> bool {
    match error {
        AwsError::Throttled { .. } => true,
        AwsError::Service { code, .. } => matches!(
            code.as_str(),
            "ServiceException" | "EC2ThrottledException" | "ResourceConflictException" | "ResourceNotReadyException"
        ),
        _ => false,
    }
}

/// The backoff before retry `attempt` (0 first): uniform in zero to the
/// doubled cap (full jitter).
fn backoff(attempt: u32) -> Duration {
    let cap = FIRST_BACKOFF
        .saturating_mul(2u32.saturating_pow(attempt.min(16)))
        .min(MAX_BACKOFF);
    let millis = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rand::random_range(0..=millis))
}

impl LambdaSigner {
    /// Invokes the function with `payload`: its answer, or its refusal.
    /// A throttled or failing signer is asked again (module documentation).
    async fn invoke(&self, payload: serde_json::Value) -> Result<Vec<u8>, String> {
        let call = Call::new("lambda:InvokeFunction", format!("function {}", self.function));
        let started = std::time::Instant::now();
        let mut attempt = 0u32;
        let mut throttled = 0u32;
        let out = loop {
            let sent = self
                .client
                .invoke()
                .function_name(&self.function)
                .payload(aws_sdk_lambda::primitives::Blob::new(payload.to_string()))
                .send()
                .await
                .map_err(|e| AwsError::from_sdk(e, &call));
            match sent {
                Ok(out) => break out,
                Err(e) if again(&e) => {
                    throttled += 1;
                    let wait = backoff(attempt);
                    attempt += 1;
                    if started.elapsed() + wait > RETRY_BUDGET {
                        return Err(format!(
                            "{e} (asked {throttled} times over {} s; the node keeps its current certificates)",
                            started.elapsed().as_secs()
                        ));
                    }
                    tracing::info!("the signer is busy ({e}); asking again in {} ms", wait.as_millis());
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e.to_string()),
            }
        };
        if throttled > 0 {
            tracing::warn!(
                "the signer was busy {throttled} time(s); it answered after {} s",
                started.elapsed().as_secs()
            );
        }
        let body = out.payload().map(|b| b.as_ref().to_vec()).unwrap_or_default();
        if out.function_error().is_some() {
            // Lambda's error payload: {"errorType": ..., "errorMessage": ...}.
            let said: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            return Err(crate::escape::escape(
                said.get("errorMessage")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("the function failed"),
            ));
        }
        Ok(body)
    }
}

impl crate::enrolment::node::Signer for LambdaSigner {
    fn audience(&self) -> &str {
        &self.function
    }

    async fn enrol(
        &self,
        request: &crate::enrolment::proof::EnrolRequest,
        asked: &[crate::certificate::Principal],
    ) -> Result<crate::enrolment::node::Answer, String> {
        let body = self
            .invoke(serde_json::json!({ "request": request, "asked": asked }))
            .await?;
        serde_json::from_slice(&body).map_err(|e| format!("the signer's answer is not one: {e}"))
    }

    async fn trust(
        &self,
        request: &crate::enrolment::proof::EnrolRequest,
        ask: crate::enrolment::node::TrustAsk,
    ) -> Result<crate::enrolment::node::Trust, String> {
        let event = match ask {
            crate::enrolment::node::TrustAsk::Claim => serde_json::json!({ "ca": true, "request": request }),
            crate::enrolment::node::TrustAsk::Trust => serde_json::json!({ "trust": true, "request": request }),
        };
        let body = self.invoke(event).await?;
        serde_json::from_slice(&body).map_err(|e| format!("the signer's answer is not one: {e}"))
    }
}
