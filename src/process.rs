//! What the process does to protect the private keys it holds in memory.

use rustix::process::{DumpableBehavior, Resource, Rlimit, set_dumpable_behavior, setrlimit};

/// Turns core dumps off for this process before any key is read: a crash
/// (or a `gcore`, or a ptrace by another process of the same user) would
/// otherwise put private keys on disk. `PR_SET_DUMPABLE` 0 also makes
/// `/proc/PID/mem` unreadable to non-root users.
pub fn forbid_core_dumps() -> std::io::Result<()> {
    setrlimit(
        Resource::Core,
        Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    )?;
    set_dumpable_behavior(DumpableBehavior::NotDumpable)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use rustix::process::{DumpableBehavior, Resource, dumpable_behavior, getrlimit};

    /// Regression (hardening finding 10): core dumps were left on while
    /// private keys were in memory.
    #[test]
    fn after_it_the_process_cannot_dump_core() {
        super::forbid_core_dumps().unwrap();
        assert_eq!(dumpable_behavior().unwrap(), DumpableBehavior::NotDumpable);
        let limit = getrlimit(Resource::Core);
        assert_eq!((limit.current, limit.maximum), (Some(0), Some(0)));
    }
}
