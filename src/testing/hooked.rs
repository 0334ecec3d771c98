//! One store wrapper for every way a test reaches into the store's calls
//! (mountpoint-s3's `failure_client.rs`): a hook sees each call (which
//! operation, the how-manyth, the label and version it moves) and lets it
//! pass, refuses it, lets it take effect and then "kills the process", or
//! holds it at a barrier. Faults at the Nth call, assertions at a stage
//! move and races between two flows are all hooks.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::aws::AwsError;
use crate::document::{CaDocument, SecretDocument};
use crate::ids::{SecretId, StageLabel, VersionId};
use crate::store::{
    CaCreateRequest, CreateRequest, SecretInfo, SecretStore, StoreError, StoredVersion, VersionSelector,
};

/// A store operation, as hooks see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// [`SecretStore::create`].
    Create,
    /// [`SecretStore::get`].
    Get,
    /// [`SecretStore::describe`].
    Describe,
    /// [`SecretStore::describe_versions`].
    DescribeVersions,
    /// [`SecretStore::all_versions`].
    AllVersions,
    /// [`SecretStore::put_version`].
    PutVersion,
    /// [`SecretStore::move_stage`].
    MoveStage,
    /// [`SecretStore::tag`].
    Tag,
    /// [`SecretStore::create_ca`].
    CreateCa,
    /// [`SecretStore::get_ca`].
    GetCa,
    /// [`crate::store::Schedules::rotate_secret`].
    RotateSecret,
    /// [`crate::store::Schedules::cancel_rotation`].
    CancelRotation,
}

/// What happens to a call that a hook faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The call is refused and has no effect (AWS said no).
    Fail,
    /// The call takes effect, then the process dies: the caller sees an
    /// error and every later call fails too.
    CrashAfter,
}

/// A hook's decision.
pub enum Action<'a> {
    /// The call goes through.
    Pass,
    /// The call is faulted.
    Fault(Fault),
    /// The call waits at the barrier, then goes through.
    Wait(&'a tokio::sync::Barrier),
    /// The call goes through, then waits at the barrier before its caller
    /// sees the answer (two flows that both read before either acts).
    WaitAfter(&'a tokio::sync::Barrier),
}

/// What happens after the inner call.
enum After<'a> {
    Return,
    Die,
    Wait(&'a tokio::sync::Barrier),
}

/// One call, as a hook sees it.
#[derive(Debug)]
pub struct Call<'c> {
    /// The operation.
    pub op: Op,
    /// The how-manyth call of this operation (from 1).
    pub nth: usize,
    /// The how-manyth call of any operation (from 1).
    pub total: usize,
    /// The label moved (`move_stage`).
    pub label: Option<&'c StageLabel>,
    /// The version a label moves to (`move_stage`).
    pub to: Option<&'c VersionId>,
    /// The labels a new version gets (`put_version`).
    pub stages: &'c [StageLabel],
}

type Hook<'a> = Box<dyn Fn(&Call<'_>) -> Action<'a> + Send + Sync + 'a>;

/// A [`SecretStore`] that asks its hook about every call.
pub struct Hooked<'a, S> {
    inner: &'a S,
    hook: Hook<'a>,
    counts: Mutex<BTreeMap<Op, usize>>,
    total: AtomicUsize,
    dead: AtomicBool,
    fired: AtomicBool,
    log: Mutex<Vec<Op>>,
    secrets: Mutex<std::collections::BTreeSet<String>>,
}

/// The decision of [`Hooked::fault_at`]: `fault` at call `at` (1-based) of
/// `op`, or of any operation when `op` is `None`.
pub fn fault_at<'a>(call: &Call<'_>, at: usize, op: Option<Op>, fault: Fault) -> Action<'a> {
    let hit = match op {
        Some(op) => call.op == op && call.nth == at,
        None => call.total == at,
    };
    if hit { Action::Fault(fault) } else { Action::Pass }
}

impl<'a, S: SecretStore> Hooked<'a, S> {
    /// `inner`, with `hook` asked about every call.
    pub fn new(inner: &'a S, hook: impl Fn(&Call<'_>) -> Action<'a> + Send + Sync + 'a) -> Self {
        Hooked {
            inner,
            hook: Box::new(hook),
            counts: Mutex::new(BTreeMap::new()),
            total: AtomicUsize::new(0),
            dead: AtomicBool::new(false),
            fired: AtomicBool::new(false),
            log: Mutex::new(Vec::new()),
            secrets: Mutex::new(std::collections::BTreeSet::new()),
        }
    }

    /// A wrapper that only counts (see [`Hooked::log`]).
    pub fn counting(inner: &'a S) -> Self {
        Hooked::new(inner, |_| Action::Pass)
    }

    /// `fault` at call `at` of `op` (of any operation when `None`).
    pub fn fault_at(inner: &'a S, at: usize, op: Option<Op>, fault: Fault) -> Self {
        Hooked::new(inner, move |call| fault_at(call, at, op, fault))
    }

    /// The operations called, in order.
    pub fn log(&self) -> Vec<Op> {
        lock(&self.log).clone()
    }

    /// Every secret a call named (read or written), as given.
    pub fn secrets(&self) -> std::collections::BTreeSet<String> {
        lock(&self.secrets).clone()
    }

    /// Whether a fault was injected.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Before a call: `Err` to refuse it, else what to do after it.
    async fn before(
        &self,
        secret: &SecretId,
        op: Op,
        label: Option<&StageLabel>,
        to: Option<&VersionId>,
        stages: &[StageLabel],
    ) -> Result<After<'a>, StoreError> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(injected(op, "the process is dead"));
        }
        lock(&self.log).push(op);
        lock(&self.secrets).insert(secret.to_string());
        let nth = {
            let mut counts = lock(&self.counts);
            let n = counts.entry(op).or_default();
            *n += 1;
            *n
        };
        let total = self.total.fetch_add(1, Ordering::SeqCst) + 1;
        let call = Call {
            op,
            nth,
            total,
            label,
            to,
            stages,
        };
        match (self.hook)(&call) {
            Action::Pass => Ok(After::Return),
            Action::Wait(barrier) => {
                barrier.wait().await;
                Ok(After::Return)
            }
            Action::WaitAfter(barrier) => Ok(After::Wait(barrier)),
            Action::Fault(fault) => {
                self.fired.store(true, Ordering::SeqCst);
                match fault {
                    Fault::Fail => Err(injected(op, "injected failure")),
                    Fault::CrashAfter => Ok(After::Die),
                }
            }
        }
    }

    async fn after<T>(&self, op: Op, then: After<'a>, result: Result<T, StoreError>) -> Result<T, StoreError> {
        match then {
            After::Return => result,
            After::Wait(barrier) => {
                barrier.wait().await;
                result
            }
            After::Die => {
                self.dead.store(true, Ordering::SeqCst);
                Err(injected(op, "killed right after the call took effect"))
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn injected(op: Op, detail: &str) -> StoreError {
    StoreError::Aws(AwsError::Unreachable {
        action: "secretsmanager:(test double)",
        detail: format!("{op:?}: {detail}"),
    })
}

impl<S: SecretStore> SecretStore for Hooked<'_, S> {
    fn clock(&self) -> i64 {
        self.inner.clock()
    }

    async fn create(&self, req: &CreateRequest<'_>) -> Result<(SecretId, VersionId), StoreError> {
        let crash = self.before(req.name, Op::Create, None, None, &[]).await?;
        let r = self.inner.create(req).await;
        self.after(Op::Create, crash, r).await
    }

    async fn get(&self, secret: &SecretId, selector: &VersionSelector) -> Result<StoredVersion, StoreError> {
        let crash = self.before(secret, Op::Get, None, None, &[]).await?;
        let r = self.inner.get(secret, selector).await;
        self.after(Op::Get, crash, r).await
    }

    async fn describe(&self, secret: &SecretId) -> Result<SecretInfo, StoreError> {
        let crash = self.before(secret, Op::Describe, None, None, &[]).await?;
        let r = self.inner.describe(secret).await;
        self.after(Op::Describe, crash, r).await
    }

    async fn describe_versions(&self, secret: &SecretId) -> Result<SecretInfo, StoreError> {
        let crash = self.before(secret, Op::DescribeVersions, None, None, &[]).await?;
        let r = self.inner.describe_versions(secret).await;
        self.after(Op::DescribeVersions, crash, r).await
    }

    async fn all_versions(&self, secret: &SecretId) -> Result<Vec<crate::store::VersionInfo>, StoreError> {
        let crash = self.before(secret, Op::AllVersions, None, None, &[]).await?;
        let r = self.inner.all_versions(secret).await;
        self.after(Op::AllVersions, crash, r).await
    }

    async fn put_version(
        &self,
        secret: &SecretId,
        document: &SecretDocument,
        token: &VersionId,
        stages: &[StageLabel],
    ) -> Result<VersionId, StoreError> {
        let crash = self.before(secret, Op::PutVersion, None, Some(token), stages).await?;
        let r = self.inner.put_version(secret, document, token, stages).await;
        self.after(Op::PutVersion, crash, r).await
    }

    async fn move_stage(
        &self,
        secret: &SecretId,
        label: &StageLabel,
        to: Option<&VersionId>,
        from: Option<&VersionId>,
    ) -> Result<(), StoreError> {
        let crash = self.before(secret, Op::MoveStage, Some(label), to, &[]).await?;
        let r = self.inner.move_stage(secret, label, to, from).await;
        self.after(Op::MoveStage, crash, r).await
    }

    async fn tag(&self, secret: &SecretId, tags: &[(String, String)]) -> Result<(), StoreError> {
        let crash = self.before(secret, Op::Tag, None, None, &[]).await?;
        let r = self.inner.tag(secret, tags).await;
        self.after(Op::Tag, crash, r).await
    }

    async fn create_ca(&self, req: &CaCreateRequest<'_>) -> Result<SecretId, StoreError> {
        let crash = self.before(req.name, Op::CreateCa, None, None, &[]).await?;
        let r = self.inner.create_ca(req).await;
        self.after(Op::CreateCa, crash, r).await
    }

    async fn get_ca(&self, name: &SecretId) -> Result<CaDocument, StoreError> {
        let crash = self.before(name, Op::GetCa, None, None, &[]).await?;
        let r = self.inner.get_ca(name).await;
        self.after(Op::GetCa, crash, r).await
    }
}

impl<S: SecretStore + crate::store::Schedules> crate::store::Schedules for Hooked<'_, S> {
    async fn rotate_secret(
        &self,
        secret: &SecretId,
        settings: Option<crate::store::ScheduleSettings<'_>>,
        now: bool,
    ) -> Result<(), StoreError> {
        let crash = self.before(secret, Op::RotateSecret, None, None, &[]).await?;
        let r = self.inner.rotate_secret(secret, settings, now).await;
        self.after(Op::RotateSecret, crash, r).await
    }

    async fn cancel_rotation(&self, secret: &SecretId) -> Result<(), StoreError> {
        let crash = self.before(secret, Op::CancelRotation, None, None, &[]).await?;
        let r = self.inner.cancel_rotation(secret).await;
        self.after(Op::CancelRotation, crash, r).await
    }
}
