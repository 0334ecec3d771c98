//! The functions that act on the secret while no one watches: the
//! rotation function Secrets Manager calls (the secret's own schedule
//! names it), and with `--stack`, the stack's admission and enrolment
//! functions (`hostkeyctl-admission-STACK`, `hostkeyctl-enrolment-STACK`):
//! each pinned to this secret, and a rotation's targets kept to its
//! cluster. Read with `lambda:GetFunctionConfiguration` only.

use super::{Finding, Level};
use crate::aws_error::AwsError;
use crate::discovery::TargetSpec;
use crate::escape::escape;
use crate::rotation::function::{ARGS_VAR, FunctionEnv, SECRET_VAR, options_from};
use crate::store::SecretInfo;

/// `admit`'s options in the admission function.
pub const ADMIT_ARGS_VAR: &str = "HOSTKEYCTL_ADMIT_ARGS";
/// The set the enrolment signer never certifies.
pub const ENROL_SET_VAR: &str = "HOSTKEYCTL_ENROL_SET_SECRET_ID";

const POLICY: &str =
    "the admin policy allows lambda:GetFunctionConfiguration on hostkeyctl's functions (iam/admin.json)";

/// Whether `id` (a name or an ARN, as the options give it) is `info`'s
/// secret.
fn names(info: &SecretInfo, id: &str) -> bool {
    id == info.name || id == info.arn.as_str()
}

/// The values of `option` in `options` (`--option VALUE` or
/// `--option=VALUE`).
pub fn values_of<'a>(options: &'a [String], option: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut words = options.iter();
    while let Some(word) = words.next() {
        if word == option {
            if let Some(value) = words.next() {
                out.push(value.as_str());
            }
        } else if let Some(value) = word.strip_prefix(option).and_then(|r| r.strip_prefix('=')) {
            out.push(value);
        }
    }
    out
}

/// The rotation function's settings: pinned to this secret, its options
/// readable. The tag targets it would rotate, to be kept to the cluster.
pub fn rotation(info: &SecretInfo, function: &str, env: Result<FunctionEnv, AwsError>) -> (Finding, Vec<TargetSpec>) {
    let subject = format!("function {}", escape(function));
    let env = match env {
        Ok(env) => env,
        Err(e) => {
            return (
                Finding::bad("function", Level::Fail, subject, escape(&e.to_string()), POLICY),
                Vec::new(),
            );
        }
    };
    let pin = format!(
        "`hostkeyctl schedule enable --secret-id {} --function {}` pins it (docs/rotation.md)",
        crate::shell::quote(&info.name).unwrap_or_else(|_| info.name.clone()),
        crate::shell::quote(function).unwrap_or_else(|_| function.to_owned()),
    );
    match env.variables.get(SECRET_VAR).map(String::as_str) {
        Some(pinned) if pinned == info.arn.as_str() => {}
        other => {
            let theirs = other
                .filter(|v| !v.is_empty())
                .map_or_else(|| "no secret".to_owned(), escape);
            return (
                Finding::bad(
                    "function",
                    Level::Fail,
                    subject,
                    format!(
                        "the secret's schedule calls it, but it rotates {theirs} ({SECRET_VAR}): each rotation fails"
                    ),
                    pin,
                ),
                Vec::new(),
            );
        }
    }
    let options = match options_from(env.variables.get(ARGS_VAR).map_or("", String::as_str)) {
        Ok(options) => options,
        Err(e) => {
            return (
                Finding::bad("function", Level::Fail, subject, escape(&e), pin),
                Vec::new(),
            );
        }
    };
    let mut targets = Vec::new();
    for value in values_of(&options, "--target") {
        match value.parse::<TargetSpec>() {
            Ok(t) => targets.push(t),
            Err(e) => {
                return (
                    Finding::bad(
                        "function",
                        Level::Fail,
                        subject,
                        format!("{ARGS_VAR}: --target {}: {}", escape(value), escape(&e.to_string())),
                        pin,
                    ),
                    Vec::new(),
                );
            }
        }
    }
    let r = &info.rotation;
    let or_dash = |v: &Option<String>| v.as_deref().map_or_else(|| "-".to_owned(), escape);
    let ok = Finding::ok(
        "function",
        subject,
        format!(
            "rotates this secret ({}; next {})",
            or_dash(&r.schedule),
            or_dash(&r.next_rotation)
        ),
    );
    (ok, targets)
}

/// A stack's admission (`admission`) or enrolment (`enrolment`) function:
/// absent is fine (each is optional), present it must name this secret.
pub fn stack_function(info: &SecretInfo, kind: &str, function: &str, env: Result<FunctionEnv, AwsError>) -> Finding {
    let subject = format!("function {}", escape(function));
    let env = match env {
        Ok(env) => env,
        Err(AwsError::NotFound { .. }) => {
            return Finding::ok("function", subject, format!("no {kind} function in the stack"));
        }
        Err(e) => return Finding::bad("function", Level::Fail, subject, escape(&e.to_string()), POLICY),
    };
    let update = "update the stack's parameters to name this secret (docs/iam.md)";
    if kind == "admission" {
        let ids = options_from(env.variables.get(ADMIT_ARGS_VAR).map_or("", String::as_str))
            .map(|o| {
                values_of(&o, "--secret-id")
                    .into_iter()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        return match ids.first() {
            Some(id) if names(info, id) => {
                Finding::ok("function", subject, "admits nodes that serve this secret's set")
            }
            other => Finding::bad(
                "function",
                Level::Warn,
                subject,
                format!(
                    "admits against {}, not this secret",
                    other.map_or_else(|| "no secret".to_owned(), |id| escape(id))
                ),
                update,
            ),
        };
    }
    match env.variables.get(ENROL_SET_VAR).map(String::as_str) {
        Some(id) if names(info, id) => Finding::ok("function", subject, "never certifies this set's keys"),
        other => Finding::bad(
            "function",
            Level::Warn,
            subject,
            format!(
                "knows {} as the set ({ENROL_SET_VAR}), not this secret: it would certify this set's keys for any node that asks",
                other
                    .filter(|v| !v.is_empty())
                    .map_or_else(|| "no secret".to_owned(), escape)
            ),
            update,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> SecretInfo {
        SecretInfo {
            arn: "arn:aws:secretsmanager:us-east-1:111122223333:secret:hostkeys/hk-AbCdEf"
                .parse()
                .unwrap(),
            name: "hostkeys/hk".to_owned(),
            description: None,
            kms_key_id: None,
            tags: Vec::new(),
            versions: Vec::new(),
            rotation: crate::store::RotationSchedule::default(),
        }
    }

    fn env(pairs: &[(&str, &str)]) -> Result<FunctionEnv, AwsError> {
        Ok(FunctionEnv {
            variables: pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            revision: None,
        })
    }

    #[test]
    fn options_are_read_in_both_spellings() {
        let o: Vec<String> = ["--target", "tag:A=1", "--target=tag:B=2", "--pull", "--target"]
            .map(str::to_owned)
            .to_vec();
        assert_eq!(values_of(&o, "--target"), ["tag:A=1", "tag:B=2"]);
    }

    #[test]
    fn a_rotation_function_pinned_elsewhere_or_unreadable_fails() {
        let arn = info().arn.to_string();
        let (f, targets) = rotation(
            &info(),
            "hostkeyctl-rotation-s",
            env(&[
                (SECRET_VAR, &arn),
                (ARGS_VAR, r#"["--pull","--target","tag:Cluster=hp"]"#),
            ]),
        );
        assert_eq!(f.level, Level::Ok, "{f:?}");
        assert_eq!(targets.len(), 1);
        let (f, _) = rotation(&info(), "f", env(&[(SECRET_VAR, "arn:other")]));
        assert!(f.level == Level::Fail && f.message.contains("arn:other"), "{f:?}");
        assert!(f.fix.unwrap().contains("schedule enable"));
        let (f, _) = rotation(&info(), "f", env(&[]));
        assert!(f.level == Level::Fail && f.message.contains("no secret"), "{f:?}");
        let (f, _) = rotation(&info(), "f", env(&[(SECRET_VAR, &arn), (ARGS_VAR, "[not json")]));
        assert_eq!(f.level, Level::Fail, "{f:?}");
        let (f, _) = rotation(
            &info(),
            "f",
            env(&[(SECRET_VAR, &arn), (ARGS_VAR, "--target nonsense")]),
        );
        assert!(f.level == Level::Fail && f.message.contains("nonsense"), "{f:?}");
    }

    #[test]
    fn stack_functions_are_optional_but_must_name_this_secret() {
        let missing = Err(AwsError::NotFound {
            action: "lambda:GetFunctionConfiguration",
            resource: "function f".to_owned(),
            message: String::new(),
        });
        assert_eq!(stack_function(&info(), "admission", "f", missing).level, Level::Ok);
        let admit = |id: &str| env(&[(ADMIT_ARGS_VAR, &format!(r#"["--secret-id","{id}"]"#))]);
        assert_eq!(
            stack_function(&info(), "admission", "f", admit("hostkeys/hk")).level,
            Level::Ok
        );
        assert_eq!(
            stack_function(&info(), "admission", "f", admit("hostkeys/other")).level,
            Level::Warn
        );
        let set = |id: &str| env(&[(ENROL_SET_VAR, id)]);
        assert_eq!(
            stack_function(&info(), "enrolment", "f", set(&info().arn.to_string())).level,
            Level::Ok
        );
        assert_eq!(stack_function(&info(), "enrolment", "f", set("")).level, Level::Warn);
        let denied = Err(AwsError::AccessDenied {
            action: "lambda:GetFunctionConfiguration",
            resource: "function f".to_owned(),
            message: "denied".to_owned(),
        });
        assert_eq!(stack_function(&info(), "enrolment", "f", denied).level, Level::Fail);
    }
}
