//! Command lines that run in a node's shell (SSM `AWS-RunShellScript`).
//!
//! Every word that goes into such a line is quoted by [`quote`], the one
//! quoting function, and only typed values can become words: the program
//! ([`Program`]), literal flags of our own, and option values that were
//! parsed by their grammar ([`SecretId`], [`VersionId`], [`Fingerprint`],
//! [`Region`], [`StageLabel`]). Options are written `--name=value` as one
//! word, so no value can ever be read as another option, even one that
//! starts with a dash.

use crate::fingerprint::Fingerprint;
use crate::ids::{Program, Region, SecretId, StageLabel, VersionId};

/// A word that cannot be quoted for `sh` (it holds a NUL byte, which no
/// shell word can carry).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a command line word holds a NUL byte, which a shell cannot pass on")]
pub struct QuoteError;

/// Quotes one word for POSIX `sh` (dash, bash): the shell hands the program
/// exactly `word`, whatever it holds. The only quoting function for text
/// that reaches a node's shell.
pub fn quote(word: &str) -> Result<String, QuoteError> {
    shlex::try_quote(word).map(|w| w.into_owned()).map_err(|_| QuoteError)
}

/// A value that may stand on a node's command line: parsed by its grammar.
pub trait Word {
    /// The value's text.
    fn text(&self) -> &str;
}

macro_rules! word {
    ($($t:ty),*) => {$(
        impl Word for $t {
            fn text(&self) -> &str {
                self.as_str()
            }
        }
    )*};
}

word!(Fingerprint, SecretId, VersionId, Region, StageLabel);

/// A shell command line under construction.
#[derive(Clone, Debug)]
pub struct CommandLine {
    words: Vec<String>,
}

impl CommandLine {
    /// A line that runs `program`.
    pub fn new(program: &Program) -> Self {
        CommandLine {
            words: vec![program.as_str().to_owned()],
        }
    }

    /// Appends a literal argument of hostkeyctl's own (`install`, `--quiet`).
    pub fn arg(&mut self, literal: &'static str) -> &mut Self {
        self.words.push(literal.to_owned());
        self
    }

    /// Appends `--name=value` as one word.
    pub fn option(&mut self, name: &'static str, value: &dyn Word) -> &mut Self {
        self.words.push(format!("--{name}={}", value.text()));
        self
    }

    /// The line, every word quoted by [`quote`].
    pub fn build(&self) -> Result<String, QuoteError> {
        let quoted: Result<Vec<String>, QuoteError> = self.words.iter().map(|w| quote(w)).collect();
        Ok(quoted?.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use proptest::prelude::*;

    use super::{CommandLine, quote};
    use crate::fingerprint::Fingerprint;
    use crate::ids::{Program, SecretId, VersionId};

    /// What `sh -c LINE` hands `printf '%s\0'` as its arguments.
    fn argv_through(shell: &str, words: &[String]) -> Vec<String> {
        let mut line = String::from("printf '%s\\0'");
        for w in words {
            line.push(' ');
            line.push_str(&quote(w).unwrap());
        }
        let out = Command::new(shell).arg("-c").arg(&line).output().unwrap();
        assert!(
            out.status.success(),
            "{shell} -c {line:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        // printf repeats its format when given no argument at all.
        let mut args: Vec<String> = text.split('\0').map(str::to_owned).collect();
        args.pop();
        if words.is_empty() {
            args.clear();
        }
        args
    }

    fn hostile_word() -> impl Strategy<Value = String> {
        prop_oneof![
            // Anything (but NUL, tested apart), biased to shell syntax.
            "[^\\x00]{0,24}",
            "[-'\"`$(){};&|<>*?!#~\\\\\\n\\t =%^\\[\\]]{0,16}",
            Just("$(touch /tmp/hostkeyctl-pwned)".to_owned()),
            Just("`id`".to_owned()),
            Just("--reload-command=id".to_owned()),
            Just("-".to_owned()),
            Just("'\\''".to_owned()),
            Just("é\u{202e}\u{1b}[31m".to_owned()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("HOSTKEYCTL_SHELL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
        ))]

        /// `sh` (dash on Debian, what SSM's agent runs) hands the program
        /// exactly the words that were quoted.
        #[test]
        fn sh_hands_over_exactly_the_quoted_words(words in prop::collection::vec(hostile_word(), 0..5)) {
            prop_assert_eq!(argv_through("sh", &words), words);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        /// bash too.
        #[test]
        fn bash_hands_over_exactly_the_quoted_words(words in prop::collection::vec(hostile_word(), 0..5)) {
            prop_assert_eq!(argv_through("bash", &words), words);
        }
    }

    #[test]
    fn a_nul_byte_is_refused() {
        assert!(quote("a\0b").is_err());
    }

    #[test]
    fn options_are_single_words_of_typed_values() {
        let program = Program::parse("/opt/bin/hostkeyctl").unwrap();
        let secret = SecretId::parse("hk/a+b=c").unwrap();
        let version = VersionId::parse("0f8e5c1a-3b6d-4c2e-9a7f-1d2e3f4a5b6c").unwrap();
        let fp = Fingerprint::parse("SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s").unwrap();
        let line = CommandLine::new(&program)
            .arg("install")
            .option("secret-id", &secret)
            .option("version-id", &version)
            .option("expect", &fp)
            .arg("--quiet")
            .build()
            .unwrap();
        let words = shlex::split(&line).unwrap();
        assert_eq!(
            words,
            [
                "/opt/bin/hostkeyctl",
                "install",
                "--secret-id=hk/a+b=c",
                "--version-id=0f8e5c1a-3b6d-4c2e-9a7f-1d2e3f4a5b6c",
                "--expect=SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s",
                "--quiet"
            ]
        );
    }
}
