//! Lambda: a function's configuration (`GetFunctionConfiguration`,
//! `UpdateFunctionConfiguration`), what `schedule enable` pins to a
//! secret ([`crate::rotation::scheduled::function::FunctionConfig`]).

use std::collections::BTreeMap;

use crate::aws::{AwsError, Call};
use crate::rotation::scheduled::function::{FunctionConfig, FunctionEnv};

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
