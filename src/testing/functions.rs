//! Lambda functions' configuration in memory: the rotation function's
//! environment, with the Lambda API's revision check.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::aws::{AwsError, Call};
use crate::rotation::scheduled::function::{FunctionConfig, FunctionEnv};

/// Functions by name or ARN, each with its variables and a revision that
/// every update changes.
#[derive(Default)]
pub struct MemFunctions {
    functions: Mutex<BTreeMap<String, FunctionEnv>>,
    updates: Mutex<usize>,
    /// Faults (`lambda:GetFunctionConfiguration`,
    /// `lambda:UpdateFunctionConfiguration`).
    pub faults: super::faults::Faults,
}

impl MemFunctions {
    /// A function named `name` with these variables.
    pub fn add(&self, name: &str, variables: &[(&str, &str)]) {
        let env = FunctionEnv {
            variables: variables
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            revision: Some("1".to_owned()),
        };
        lock(&self.functions).insert(name.to_owned(), env);
    }

    /// A function's variables now.
    pub fn variables(&self, name: &str) -> BTreeMap<String, String> {
        lock(&self.functions)
            .get(name)
            .map(|e| e.variables.clone())
            .unwrap_or_default()
    }

    /// How many updates were made.
    pub fn updates(&self) -> usize {
        *lock(&self.updates)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn not_found(action: &'static str, function: &str) -> AwsError {
    AwsError::NotFound {
        action,
        resource: format!("function {function}"),
        message: format!("Function not found: {function}"),
    }
}

impl FunctionConfig for MemFunctions {
    async fn environment(&self, function: &str) -> Result<FunctionEnv, AwsError> {
        self.faults.enter("lambda:GetFunctionConfiguration")?;
        lock(&self.functions)
            .get(function)
            .cloned()
            .ok_or_else(|| not_found("lambda:GetFunctionConfiguration", function))
    }

    async fn set_environment(
        &self,
        function: &str,
        variables: &BTreeMap<String, String>,
        revision: Option<&str>,
    ) -> Result<(), AwsError> {
        let call = Call::new("lambda:UpdateFunctionConfiguration", format!("function {function}"));
        self.faults.enter(call.action)?;
        let mut functions = lock(&self.functions);
        let env = functions
            .get_mut(function)
            .ok_or_else(|| not_found(call.action, function))?;
        if revision.is_some_and(|r| Some(r) != env.revision.as_deref()) {
            return Err(AwsError::Service {
                action: call.action,
                resource: format!("function {function}"),
                code: "PreconditionFailedException".to_owned(),
                message: "The Revision Id provided does not match the latest Revision Id.".to_owned(),
            });
        }
        let next: u64 = env.revision.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0) + 1;
        env.variables = variables.clone();
        env.revision = Some(next.to_string());
        *lock(&self.updates) += 1;
        Ok(())
    }
}
