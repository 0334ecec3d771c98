//! One module per subcommand: each validates its arguments into a plan,
//! runs it, and prints its result.

pub mod keygen;

use crate::cli::{Cli, Command};
use crate::exit::{Failure, Status};

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<Status, Failure> {
    let output = cli.global.output.resolve();
    match cli.command {
        Command::Keygen(args) => keygen::run(&args, output),
    }
}
