//! A store wrapper that fails, or dies like a killed process, at a chosen
//! call: the way to test that every step of a flow can be interrupted.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::aws::AwsError;
use crate::document::SecretDocument;
use crate::ids::{SecretId, StageLabel, VersionId};
use crate::store::{CreateRequest, SecretInfo, SecretStore, StoreError, StoredVersion, VersionSelector};

/// What happens at the chosen call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The call is refused and has no effect (AWS said no).
    Fail,
    /// The call takes effect, then the process dies: the caller sees an
    /// error and every later call fails too.
    CrashAfter,
}

/// A [`SecretStore`] that injects a [`Fault`] at the Nth call (1-based) of
/// one operation, or of any operation when `operation` is `None`.
pub struct Faulty<'a, S> {
    inner: &'a S,
    at: usize,
    operation: Option<&'static str>,
    fault: Fault,
    calls: AtomicUsize,
    dead: AtomicBool,
    log: Mutex<Vec<&'static str>>,
}

impl<'a, S: SecretStore> Faulty<'a, S> {
    /// Injects `fault` at call `at` of `operation` (`get`, `describe`,
    /// `create`, `put_version`, `move_stage`, `tag`; `None` counts all).
    pub fn new(inner: &'a S, at: usize, operation: Option<&'static str>, fault: Fault) -> Self {
        Faulty {
            inner,
            at,
            operation,
            fault,
            calls: AtomicUsize::new(0),
            dead: AtomicBool::new(false),
            log: Mutex::new(Vec::new()),
        }
    }

    /// A wrapper that only counts.
    pub fn counting(inner: &'a S) -> Self {
        Faulty::new(inner, 0, None, Fault::Fail)
    }

    /// The operations called, in order.
    pub fn log(&self) -> Vec<&'static str> {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether the fault was injected.
    pub fn fired(&self) -> bool {
        self.at > 0 && self.calls.load(Ordering::SeqCst) >= self.at
    }

    /// Before a call: `Err` to refuse it, `Ok(true)` to run it and die.
    fn before(&self, operation: &'static str) -> Result<bool, StoreError> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(injected(operation, "the process is dead"));
        }
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(operation);
        if self.operation.is_some_and(|o| o != operation) {
            return Ok(false);
        }
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n != self.at {
            return Ok(false);
        }
        match self.fault {
            Fault::Fail => Err(injected(operation, "injected failure")),
            Fault::CrashAfter => Ok(true),
        }
    }

    fn after<T>(&self, operation: &'static str, crash: bool, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if crash {
            self.dead.store(true, Ordering::SeqCst);
            return Err(injected(operation, "killed right after the call took effect"));
        }
        result
    }
}

fn injected(operation: &'static str, detail: &str) -> StoreError {
    StoreError::Aws(AwsError::Unreachable {
        action: operation,
        detail: detail.to_owned(),
    })
}

impl<S: SecretStore> SecretStore for Faulty<'_, S> {
    async fn create(&self, req: &CreateRequest<'_>) -> Result<(SecretId, VersionId), StoreError> {
        let crash = self.before("create")?;
        let r = self.inner.create(req).await;
        self.after("create", crash, r)
    }

    async fn get(&self, secret: &SecretId, selector: &VersionSelector) -> Result<StoredVersion, StoreError> {
        let crash = self.before("get")?;
        let r = self.inner.get(secret, selector).await;
        self.after("get", crash, r)
    }

    async fn describe(&self, secret: &SecretId) -> Result<SecretInfo, StoreError> {
        let crash = self.before("describe")?;
        let r = self.inner.describe(secret).await;
        self.after("describe", crash, r)
    }

    async fn put_version(
        &self,
        secret: &SecretId,
        document: &SecretDocument,
        token: &VersionId,
        stages: &[StageLabel],
    ) -> Result<VersionId, StoreError> {
        let crash = self.before("put_version")?;
        let r = self.inner.put_version(secret, document, token, stages).await;
        self.after("put_version", crash, r)
    }

    async fn move_stage(
        &self,
        secret: &SecretId,
        label: &StageLabel,
        to: Option<&VersionId>,
        from: Option<&VersionId>,
    ) -> Result<(), StoreError> {
        let crash = self.before("move_stage")?;
        let r = self.inner.move_stage(secret, label, to, from).await;
        self.after("move_stage", crash, r)
    }

    async fn tag(&self, secret: &SecretId, tags: &[(String, String)]) -> Result<(), StoreError> {
        let crash = self.before("tag")?;
        let r = self.inner.tag(secret, tags).await;
        self.after("tag", crash, r)
    }
}
