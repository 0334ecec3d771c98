//! The scheduled rotation's function and its configuration: the one secret
//! it rotates (`HOSTKEYCTL_SECRET_ARN`) and `rotate`'s options
//! (`HOSTKEYCTL_ROTATE_ARGS`), in the function's environment.
//!
//! A function acts on its own secret alone: its events are a stranger's
//! requests ([`crate::rotation::check_event_secret`]). `schedule enable` pins a
//! function that has no secret yet to the one it enables, and refuses one
//! pinned to another: one function per fleet, each role scoped to its own
//! secret (docs/rotation.md, "Scheduled rotation").

use std::collections::BTreeMap;
use std::future::Future;

use crate::aws_error::AwsError;
use crate::ids::SecretId;

/// The variable holding `rotate`'s options.
pub const ARGS_VAR: &str = "HOSTKEYCTL_ROTATE_ARGS";
/// The variable naming the one secret the function rotates (an ARN).
pub const SECRET_VAR: &str = "HOSTKEYCTL_SECRET_ARN";

/// `rotate`'s options from [`ARGS_VAR`]: a JSON array of strings, or
/// words separated by white space.
pub fn options_from(text: &str) -> Result<Vec<String>, String> {
    let text = text.trim();
    if text.starts_with('[') {
        serde_json::from_str(text).map_err(|e| {
            format!("{ARGS_VAR} is not a JSON array of strings ({e}); for example [\"--target\", \"tag:Role=login\"]")
        })
    } else {
        Ok(text.split_whitespace().map(str::to_owned).collect())
    }
}

/// A function's environment variables and the revision they were read at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionEnv {
    /// `Environment.Variables`.
    pub variables: BTreeMap<String, String>,
    /// `RevisionId`: an update is refused if the function changed since.
    pub revision: Option<String>,
}

/// The Lambda API's configuration calls: AWS, or a double.
pub trait FunctionConfig: Sync {
    /// GetFunctionConfiguration's environment.
    fn environment(&self, function: &str) -> impl Future<Output = Result<FunctionEnv, AwsError>> + Send;

    /// UpdateFunctionConfiguration with these variables (all of them), if
    /// the function is still at `revision`.
    fn set_environment(
        &self,
        function: &str,
        variables: &BTreeMap<String, String>,
        revision: Option<&str>,
    ) -> impl Future<Output = Result<(), AwsError>> + Send;
}

/// Why a function could not be pinned to a secret.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// The Lambda API failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The function rotates another secret.
    #[error(
        "function {function} rotates {theirs} ({SECRET_VAR}), not {ours}: one function per fleet, so that no fleet's function can push another's keys. Deploy a function for this secret (docs/rotation.md). Nothing was changed"
    )]
    OtherSecret {
        /// The function.
        function: String,
        /// The secret it is pinned to.
        theirs: String,
        /// The secret asked for.
        ours: String,
    },
    /// What is configured does not parse, or cannot take the option.
    #[error("function {function}: {detail}. Nothing was changed")]
    Options {
        /// The function.
        function: String,
        /// What is wrong.
        detail: String,
    },
}

/// Pins `function` to `secret` (an ARN), adding `--trust-timers` to its
/// options when asked: what was done, in a sentence.
pub async fn pin(
    functions: &impl FunctionConfig,
    function: &str,
    secret: &SecretId,
    trust_timers: bool,
) -> Result<String, PinError> {
    let env = functions.environment(function).await?;
    let options_error = |detail: String| PinError::Options {
        function: function.to_owned(),
        detail,
    };
    let mut variables = env.variables.clone();
    let mut done = Vec::new();
    match env.variables.get(SECRET_VAR) {
        Some(theirs) if theirs != secret.as_str() => {
            return Err(PinError::OtherSecret {
                function: function.to_owned(),
                theirs: crate::escape::escape(theirs),
                ours: secret.to_string(),
            });
        }
        Some(_) => {}
        None => {
            variables.insert(SECRET_VAR.to_owned(), secret.to_string());
            done.push(format!("{SECRET_VAR} set to {secret}"));
        }
    }
    if trust_timers {
        let mut options =
            options_from(env.variables.get(ARGS_VAR).map_or("", String::as_str)).map_err(options_error)?;
        if !options.iter().any(|o| o == "--pull") {
            return Err(options_error(format!(
                "--trust-timers is for a pull fleet, and {ARGS_VAR} has no --pull"
            )));
        }
        if !options.iter().any(|o| o == "--trust-timers") {
            options.push("--trust-timers".to_owned());
            let json = serde_json::to_string(&options).map_err(|e| options_error(e.to_string()))?;
            variables.insert(ARGS_VAR.to_owned(), json);
            done.push(format!("--trust-timers added to {ARGS_VAR}"));
        }
    }
    if done.is_empty() {
        return Ok(format!("function {function} rotates this secret"));
    }
    functions
        .set_environment(function, &variables, env.revision.as_deref())
        .await?;
    Ok(format!("function {function}: {}", done.join("; ")))
}

impl crate::exit::ExitStatus for PinError {
    /// The Lambda API's trouble is AWS's status; a refusal 2.
    fn status(&self) -> crate::exit::Status {
        match self {
            PinError::Aws(a) => crate::exit::ExitStatus::status(a),
            _ => crate::exit::Status::Usage,
        }
    }
}
