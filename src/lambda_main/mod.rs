//! The Lambda functions (feature `lambda`): the admin binary, run as
//! `bootstrap` by the `provided.al2023` runtime, is one of three functions
//! as `HOSTKEYCTL_FUNCTION` says, each handler in a file of its own:
//!
//! - unset or `rotation`: the scheduled rotation's ([`rotation`]), which
//!   answers Secrets Manager's four rotation steps;
//! - `admission`: `admit` on events ([`admission`]);
//! - `enrolment`: the cluster's signer ([`enrolment`]).
//!
//! The runtime's own variables are checked first: lambda_runtime panics on
//! a missing one.

mod admission;
mod enrolment;
mod rotation;

use std::process::ExitCode;

use hostkeyctl::exit::Status;

/// Which function this is: `rotation` (or unset), `admission`, `enrolment`.
pub const FUNCTION_VAR: &str = "HOSTKEYCTL_FUNCTION";

/// What the Lambda runtime sets, checked before lambda_runtime reads it
/// (it panics on a missing one).
const RUNTIME_VARS: [&str; 4] = [
    "AWS_LAMBDA_RUNTIME_API",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_FUNCTION_VERSION",
];

/// What is wrong with the runtime's variables, which lambda_runtime reads
/// with `expect` (a panic): one missing, or a memory size that is no number.
pub fn runtime_env_problem(get: impl Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(missing) = RUNTIME_VARS.iter().find(|v| get(v).is_none()) {
        return Some(format!(
            "{missing} is not set: `bootstrap` is the rotation, admission or enrolment function for the Lambda runtime; run `hostkeyctl` for the command line"
        ));
    }
    let memory = get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE").unwrap_or_default();
    memory.parse::<i32>().is_err().then(|| {
        format!(
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE is {:?}, not a number of MB; the Lambda runtime sets it",
            hostkeyctl::escape::escape(&memory)
        )
    })
}

/// Whether this process is a Lambda function's `bootstrap`: started under
/// that name, with no arguments.
pub fn invoked_as_bootstrap() -> bool {
    let mut args = std::env::args_os();
    let name = args.next();
    let is_bootstrap = name
        .as_deref()
        .and_then(|n| std::path::Path::new(n).file_name())
        .is_some_and(|n| n == "bootstrap");
    is_bootstrap && args.next().is_none()
}

/// Runs the function `HOSTKEYCTL_FUNCTION` names until the runtime stops
/// it.
pub fn main(runtime: &tokio::runtime::Runtime) -> ExitCode {
    let usage = |message: String| {
        eprintln!("error: {}", hostkeyctl::escape::escape_lines(&message));
        ExitCode::from(Status::Usage.code())
    };
    if let Some(problem) = runtime_env_problem(|v| std::env::var(v).ok()) {
        return usage(problem);
    }
    match std::env::var(FUNCTION_VAR).ok().as_deref().map(str::trim) {
        None | Some("" | "rotation") => rotation::main(runtime, usage),
        Some("admission") => admission::main(runtime, usage),
        Some("enrolment") => enrolment::main(runtime, usage),
        Some(other) => usage(format!(
            "{} is {:?}: `rotation` (or unset) for the scheduled rotation, `admission` for admit on events, `enrolment` for the cluster's signer",
            FUNCTION_VAR,
            hostkeyctl::escape::escape(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{RUNTIME_VARS, runtime_env_problem};

    #[test]
    fn the_runtime_variables_are_checked_before_lambda_runtime_panics_on_them() {
        let all = |memory: &'static str| {
            move |v: &str| {
                Some(
                    if v == "AWS_LAMBDA_FUNCTION_MEMORY_SIZE" {
                        memory
                    } else {
                        "x"
                    }
                    .to_owned(),
                )
            }
        };
        assert_eq!(runtime_env_problem(all("256")), None);
        let e = runtime_env_problem(all("lots")).unwrap();
        assert!(e.contains("not a number"), "{e}");
        for missing in RUNTIME_VARS {
            let e = runtime_env_problem(|v: &str| (v != missing).then(|| "256".to_owned())).unwrap();
            assert!(e.starts_with(missing) && e.contains("is not set"), "{e}");
        }
    }
}
