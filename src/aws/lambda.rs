//! Lambda: a function's configuration (`GetFunctionConfiguration`,
//! `UpdateFunctionConfiguration`), what `schedule enable` pins to a
//! secret ([`crate::rotation::function::FunctionConfig`]).

use std::collections::BTreeMap;

use crate::aws::{AwsError, Call};
use crate::rotation::function::{FunctionConfig, FunctionEnv};

/// The Lambda API.
#[derive(Clone, Debug)]
pub struct LambdaFunctions {
    client: aws_sdk_lambda::Client,
}

impl LambdaFunctions {
    /// A client for `config`'s region and credentials.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        LambdaFunctions {
            client: aws_sdk_lambda::Client::new(config),
        }
    }
}

impl FunctionConfig for LambdaFunctions {
    async fn environment(&self, function: &str) -> Result<FunctionEnv, AwsError> {
        let call = Call::new("lambda:GetFunctionConfiguration", format!("function {function}"));
        let out = self
            .client
            .get_function_configuration()
            .function_name(function)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(FunctionEnv {
            variables: out
                .environment()
                .and_then(|e| e.variables())
                .map(|v| v.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
            revision: out.revision_id().map(str::to_owned),
        })
    }

    async fn set_environment(
        &self,
        function: &str,
        variables: &BTreeMap<String, String>,
        revision: Option<&str>,
    ) -> Result<(), AwsError> {
        let call = Call::new("lambda:UpdateFunctionConfiguration", format!("function {function}"));
        let environment = aws_sdk_lambda::types::Environment::builder()
            .set_variables(Some(variables.clone().into_iter().collect()))
            .build();
        self.client
            .update_function_configuration()
            .function_name(function)
            .environment(environment)
            .set_revision_id(revision.map(str::to_owned))
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }
}

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

impl crate::enrolment::node::Signer for LambdaSigner {
    fn audience(&self) -> &str {
        &self.function
    }

    async fn enrol(
        &self,
        request: &crate::enrolment::proof::EnrolRequest,
        asked: &[crate::certificate::Principal],
    ) -> Result<crate::enrolment::node::Answer, String> {
        let call = Call::new("lambda:InvokeFunction", format!("function {}", self.function));
        let payload = serde_json::json!({ "request": request, "asked": asked });
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
        serde_json::from_slice(&body).map_err(|e| format!("the signer's answer is not one: {e}"))
    }
}
