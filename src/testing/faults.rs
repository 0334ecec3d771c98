//! "Fail the Nth call" for every double (mountpoint-s3's failure-injecting
//! client): a double names each operation it answers by its IAM action
//! (`elasticloadbalancing:RegisterTargets`, `ssm:ListCommandInvocations`),
//! and asks its [`Faults`] as each call starts. A planned fault refuses the
//! call before it takes effect, with the error the trait's callers meet
//! when the service cannot be reached ([`Injected`] converts to each).
//! [`crate::testing::Hooked`] does more for the secret store (a call that
//! takes effect and then dies, a barrier); this is what every other double
//! shares.

use std::sync::Mutex;

use crate::aws_error::AwsError;

/// One planned fault: calls `from..=to` (1-based) of `op`, or of any
/// operation when `op` is none.
#[derive(Clone, Copy, Debug)]
struct Plan {
    op: Option<&'static str>,
    from: usize,
    to: usize,
}

/// The faults planned for one double, and the calls it was asked.
#[derive(Debug, Default)]
pub struct Faults {
    plans: Mutex<Vec<Plan>>,
    calls: Mutex<Vec<&'static str>>,
}

/// A call a [`Faults`] refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("injected failure: call {nth} of {op}")]
pub struct Injected {
    /// The operation.
    pub op: &'static str,
    /// The how-manyth call of it (from 1).
    pub nth: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Faults {
    /// No fault planned.
    pub fn new() -> Self {
        Faults::default()
    }

    /// The `nth` call (from 1) of `op` fails.
    pub fn fail_nth(&self, op: &'static str, nth: usize) -> &Self {
        self.plan(Some(op), nth, nth)
    }

    /// Every call of `op` from the `nth` on fails: an outage.
    pub fn fail_from(&self, op: &'static str, nth: usize) -> &Self {
        self.plan(Some(op), nth, usize::MAX)
    }

    /// The `nth` call of any operation fails.
    pub fn fail_nth_call(&self, nth: usize) -> &Self {
        self.plan(None, nth, nth)
    }

    /// No more faults: what was planned ends (an outage over).
    pub fn clear(&self) {
        lock(&self.plans).clear();
    }

    fn plan(&self, op: Option<&'static str>, from: usize, to: usize) -> &Self {
        assert!(from >= 1, "calls count from 1");
        lock(&self.plans).push(Plan { op, from, to });
        self
    }

    /// Every operation asked so far, in order.
    pub fn calls(&self) -> Vec<&'static str> {
        lock(&self.calls).clone()
    }

    /// How many times `op` was asked.
    pub fn count(&self, op: &str) -> usize {
        lock(&self.calls).iter().filter(|c| **c == op).count()
    }

    /// A double's first step in each call: counts it, and refuses it when
    /// a fault is planned there.
    pub fn enter(&self, op: &'static str) -> Result<(), Injected> {
        let (nth, total) = {
            let mut calls = lock(&self.calls);
            calls.push(op);
            (calls.iter().filter(|c| **c == op).count(), calls.len())
        };
        let hit = lock(&self.plans).iter().any(|p| match p.op {
            Some(o) => o == op && (p.from..=p.to).contains(&nth),
            None => (p.from..=p.to).contains(&total),
        });
        if hit { Err(Injected { op, nth }) } else { Ok(()) }
    }
}

impl From<Injected> for AwsError {
    fn from(i: Injected) -> Self {
        AwsError::Unreachable {
            action: i.op,
            detail: i.to_string(),
        }
    }
}

impl From<Injected> for crate::discovery::DiscoveryError {
    fn from(i: Injected) -> Self {
        crate::discovery::DiscoveryError::Aws(i.into())
    }
}

impl From<Injected> for crate::store::StoreError {
    fn from(i: Injected) -> Self {
        crate::store::StoreError::Aws(i.into())
    }
}

impl From<Injected> for String {
    fn from(i: Injected) -> Self {
        i.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nth_call_of_an_operation_fails_and_no_other() {
        let f = Faults::new();
        f.fail_nth("a", 2);
        assert!(f.enter("a").is_ok());
        assert!(f.enter("b").is_ok());
        assert_eq!(f.enter("a"), Err(Injected { op: "a", nth: 2 }));
        assert!(f.enter("a").is_ok());
        assert_eq!(f.count("a"), 3);
        assert_eq!(f.calls(), ["a", "b", "a", "a"]);
    }

    #[test]
    fn an_outage_fails_every_call_from_the_nth_and_any_operation_can_be_counted() {
        let f = Faults::new();
        f.fail_from("a", 2).fail_nth_call(1);
        assert!(f.enter("b").is_err(), "the first call of any operation");
        assert!(f.enter("a").is_ok());
        assert!(f.enter("a").is_err());
        assert!(f.enter("a").is_err());
        let aws: AwsError = f.enter("a").unwrap_err().into();
        assert!(aws.to_string().contains("call 4 of a"), "{aws}");
    }
}
