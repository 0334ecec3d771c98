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
use crate::rotation::scheduled::function::{ARGS_VAR, FunctionEnv, SECRET_VAR, options_from};
use crate::store::SecretInfo;

/// `admit`'s options in the admission function.
pub const ADMIT_ARGS_VAR: &str = "HOSTKEYCTL_ADMIT_ARGS";
/// The set the enrolment signer never certifies.
pub const ENROL_SET_VAR: &str = "HOSTKEYCTL_ENROL_SET_SECRET_ID";

const POLICY: &str =
    "the admin policy allows lambda:GetFunctionConfiguration on hostkeyctl's functions (iam/admin.json)";

/// Whether `id` (a name, an ARN, or a partial ARN without Secrets
/// Manager's six-character suffix, as the options give it; the functions
/// trim it) is `info`'s secret.
fn names(info: &SecretInfo, id: &str) -> bool {
    let id = id.trim();
    let arn = info.arn.as_str();
    let partial = arn
        .rsplit_once('-')
        .filter(|(_, suffix)| suffix.len() == 6 && suffix.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(|(head, _)| head);
    id == info.name || id == arn || Some(id) == partial
}

/// A read doctor is not allowed is no broken set-up: a warning.
fn unreadable(subject: String, e: &AwsError) -> Finding {
    let level = if matches!(e, AwsError::AccessDenied { .. }) {
        Level::Warn
    } else {
        Level::Fail
    };
    Finding::bad(
        "function",
        level,
        subject,
        format!("cannot tell: {}", escape(&e.to_string())),
        POLICY,
    )
}

/// What the rotation function's settings say.
pub struct Rotation {
    /// The finding.
    pub finding: Finding,
    /// The targets its `rotate` takes, to be kept to the cluster.
    pub targets: Vec<TargetSpec>,
    /// Its `rotate` has `--allow-other-clusters`.
    pub allow_other_clusters: bool,
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
pub fn rotation(info: &SecretInfo, function: &str, env: Result<FunctionEnv, AwsError>) -> Rotation {
    let subject = format!("function {}", escape(function));
    let done = |finding| Rotation {
        finding,
        targets: Vec::new(),
        allow_other_clusters: false,
    };
    let env = match env {
        Ok(env) => env,
        Err(e) => return done(unreadable(subject, &e)),
    };
    let quote = |v: &str| crate::shell::quote(v).unwrap_or_else(|_| v.to_owned());
    match env.variables.get(SECRET_VAR).map(|v| v.trim()) {
        Some(pinned) if pinned == info.arn.as_str() => {}
        Some(other) if !other.is_empty() => {
            return done(Finding::bad(
                "function",
                Level::Fail,
                subject,
                format!(
                    "the secret's schedule calls it, but it rotates {} ({SECRET_VAR}): each rotation fails",
                    escape(other)
                ),
                format!(
                    "one function per secret: deploy one for this secret (the stack's RotationSecretArn), then `hostkeyctl schedule enable --secret-id {} --function NEW_FUNCTION` (docs/rotation.md)",
                    quote(&info.name)
                ),
            ));
        }
        _ => {
            return done(Finding::bad(
                "function",
                Level::Fail,
                subject,
                format!(
                    "the secret's schedule calls it, but it is pinned to no secret ({SECRET_VAR}): each rotation fails"
                ),
                format!(
                    "`hostkeyctl schedule enable --secret-id {} --function {}` pins it (docs/rotation.md)",
                    quote(&info.name),
                    quote(function)
                ),
            ));
        }
    }
    let options_fix = format!("correct {ARGS_VAR} (the stack's RotationArgs): `rotate`'s options as a JSON array");
    let options = match options_from(env.variables.get(ARGS_VAR).map_or("", String::as_str)) {
        Ok(options) => options,
        Err(e) => return done(Finding::bad("function", Level::Fail, subject, escape(&e), options_fix)),
    };
    let mut targets = Vec::new();
    for value in values_of(&options, "--target") {
        match value.parse::<TargetSpec>() {
            Ok(t) => targets.push(t),
            Err(e) => {
                return done(Finding::bad(
                    "function",
                    Level::Fail,
                    subject,
                    format!("{ARGS_VAR}: --target {}: {}", escape(value), escape(&e.to_string())),
                    options_fix,
                ));
            }
        }
    }
    let r = &info.rotation;
    let or_dash = |v: &Option<String>| v.as_deref().map_or_else(|| "-".to_owned(), escape);
    Rotation {
        finding: Finding::ok(
            "function",
            subject,
            format!(
                "rotates this secret ({}; next {})",
                or_dash(&r.schedule),
                or_dash(&r.next_rotation)
            ),
        ),
        targets,
        allow_other_clusters: options.iter().any(|o| o == "--allow-other-clusters"),
    }
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
        Err(e) => return unreadable(subject, &e),
    };
    let update = "update the stack's parameters to name this secret (docs/iam.md)";
    if kind == "admission" {
        let ids = match options_from(env.variables.get(ADMIT_ARGS_VAR).map_or("", String::as_str)) {
            Ok(o) => values_of(&o, "--secret-id")
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>(),
            Err(e) => return Finding::bad("function", Level::Fail, subject, escape(&e), update),
        };
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
    match env.variables.get(ENROL_SET_VAR).map(|v| v.trim()) {
        Some(id) if names(info, id) => Finding::ok("function", subject, "never certifies this set's keys"),
        other => Finding::bad(
            "function",
            Level::Warn,
            subject,
            format!(
                "knows {} as the set ({ENROL_SET_VAR}), not this secret: it cannot refuse this set's keys by name, so an enrolling node that holds them can get them certified",
                other
                    .filter(|v| !v.trim().is_empty())
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
        let ok = rotation(
            &info(),
            "hostkeyctl-rotation-s",
            env(&[
                (SECRET_VAR, &arn),
                (ARGS_VAR, r#"["--pull","--target","tag:Cluster=hp"]"#),
            ]),
        );
        assert_eq!(ok.finding.level, Level::Ok, "{:?}", ok.finding);
        assert_eq!((ok.targets.len(), ok.allow_other_clusters), (1, false));
        let f = rotation(&info(), "f", env(&[(SECRET_VAR, "arn:other")])).finding;
        assert!(f.level == Level::Fail && f.message.contains("arn:other"), "{f:?}");
        // schedule enable refuses a function pinned to another secret: the
        // fix is a function of this secret's own.
        assert!(f.fix.unwrap().contains("NEW_FUNCTION"));
        let f = rotation(&info(), "f", env(&[])).finding;
        assert!(f.level == Level::Fail && f.message.contains("no secret"), "{f:?}");
        assert!(f.fix.unwrap().contains("--function f"));
        let f = rotation(&info(), "f", env(&[(SECRET_VAR, &arn), (ARGS_VAR, "[not json")])).finding;
        assert!(f.level == Level::Fail && f.fix.unwrap().contains("RotationArgs"));
        let bad = rotation(
            &info(),
            "f",
            env(&[(SECRET_VAR, &arn), (ARGS_VAR, "--target nonsense")]),
        );
        assert!(bad.finding.level == Level::Fail && bad.finding.message.contains("nonsense"));
        let allow = rotation(
            &info(),
            "f",
            env(&[
                (SECRET_VAR, &arn),
                (ARGS_VAR, "--allow-other-clusters --target tag:Role=login"),
            ]),
        );
        assert!(allow.allow_other_clusters);
    }

    #[test]
    fn a_secret_is_named_by_its_name_its_arn_or_its_partial_arn() {
        let i = info();
        for id in [
            "hostkeys/hk",
            " hostkeys/hk\n",
            "arn:aws:secretsmanager:us-east-1:111122223333:secret:hostkeys/hk-AbCdEf",
            "arn:aws:secretsmanager:us-east-1:111122223333:secret:hostkeys/hk",
        ] {
            assert!(names(&i, id), "{id}");
        }
        for id in [
            "hostkeys/h",
            "arn:aws:secretsmanager:us-east-1:111122223333:secret:hostkeys/hk-AbCdEg",
        ] {
            assert!(!names(&i, id), "{id}");
        }
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
            stack_function(&info(), "enrolment", "f", set(info().arn.as_ref())).level,
            Level::Ok
        );
        assert_eq!(stack_function(&info(), "enrolment", "f", set("")).level, Level::Warn);
        let denied = Err(AwsError::AccessDenied {
            action: "lambda:GetFunctionConfiguration",
            resource: "function f".to_owned(),
            message: "denied".to_owned(),
        });
        // Not allowed to read: a warning, never a broken set-up.
        assert_eq!(stack_function(&info(), "enrolment", "f", denied).level, Level::Warn);
    }
}
