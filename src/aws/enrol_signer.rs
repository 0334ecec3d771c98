//! The enrolment signer as a node reaches it: Lambda's Invoke, in the node
//! build too.

use crate::aws::{AwsError, Call};

/// The enrolment signer as a node reaches it: `lambda:InvokeFunction` of
/// the function, RequestResponse ([`crate::enrolment::node::Signer`]).
#[derive(Clone, Debug)]
pub struct LambdaSigner {
    client: aws_sdk_lambda::Client,
    function: String,
}

impl LambdaSigner {
    /// The signer `function` (its ARN: the audience of every proof).
    pub fn new(config: &aws_config::SdkConfig, function: &str) -> Self {
        LambdaSigner {
            client: aws_sdk_lambda::Client::new(config),
            function: function.to_owned(),
        }
    }
}

impl LambdaSigner {
    /// Invokes the function with `payload`: its answer, or its refusal.
    async fn invoke(&self, payload: serde_json::Value) -> Result<Vec<u8>, String> {
        let call = Call::new("lambda:InvokeFunction", format!("function {}", self.function));
        let out = self
            .client
            .invoke()
            .function_name(&self.function)
            .payload(aws_sdk_lambda::primitives::Blob::new(payload.to_string()))
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call).to_string())?;
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

    async fn ca(
        &self,
        request: &crate::enrolment::proof::EnrolRequest,
    ) -> Result<crate::enrolment::node::Trust, String> {
        let body = self
            .invoke(serde_json::json!({ "ca": true, "request": request }))
            .await?;
        serde_json::from_slice(&body).map_err(|e| format!("the signer's answer is not one: {e}"))
    }
}
