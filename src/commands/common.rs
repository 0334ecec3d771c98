//! What several commands share: the region for node command lines, a
//! progress bar, and printing a push. No command imports another; they
//! all import this.

use std::io::IsTerminal;
use std::time::Duration;

use crate::discovery::Instance;
use crate::exit::Failure;
use crate::ids::{Region, SecretId};
use crate::output::{self, OutputFormat};
use crate::rollout::PushOutcome;

/// The region of an SDK configuration, parsed (it goes on node command lines).
pub fn config_region(config: &aws_config::SdkConfig) -> Result<Option<Region>, Failure> {
    crate::aws::config_region(config).map_err(Failure::usage)
}

fn progress_bar(total: usize, quiet: bool) -> Option<indicatif::ProgressBar> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} nodes done ({elapsed})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    Some(bar)
}

/// A progress bar of nodes done, on a terminal only.
pub struct NodeProgress {
    bar: Option<indicatif::ProgressBar>,
}

impl NodeProgress {
    /// A bar over `total` nodes (none when quiet or not on a terminal).
    pub fn new(total: usize, quiet: bool) -> Self {
        NodeProgress {
            bar: progress_bar(total, quiet),
        }
    }

    /// A rollout's progress callback.
    pub fn update(&self, done: usize, _total: usize) {
        if let Some(b) = &self.bar {
            b.set_position(done as u64);
        }
    }

    /// Clears the bar.
    pub fn finish(self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Prints a push outcome as a table or JSON.
pub fn print_outcome(outcome: &PushOutcome, secret: &SecretId, output: OutputFormat) -> Result<(), Failure> {
    match output {
        OutputFormat::Json => output::print_json(&outcome.report(secret)).map_err(Failure::usage),
        _ => {
            print!("{}", outcome.text());
            Ok(())
        }
    }
}

/// The instances a dry run would send to, as a table.
pub fn instances_table(instances: &[Instance]) -> comfy_table::Table {
    let mut table = output::table(&["INSTANCE", "NAME", "PRIVATE IP"]);
    for i in instances {
        output::add_row(
            &mut table,
            vec![
                i.instance_id.clone(),
                i.name.clone().unwrap_or_default(),
                i.private_ip.clone().unwrap_or_default(),
            ],
        );
    }
    table
}
