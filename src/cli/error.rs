//! What a command can fail with, and the exit code each failure means
//! (docs/cli.md): 2 when the configuration, the rules or the command line
//! cannot work, including faults found only at start-up that no retry can
//! cure (a property librdkafka rejects, a Redis URL or TLS file that cannot
//! be used, a refused Redis password); 1 when something failed while
//! running.

use std::error::Error;
use std::fmt::Display;
use std::path::Path;

/// A command's failure.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// Exit 2: the message names the file, setting or flag at fault.
    #[error("{0}")]
    Invalid(String),
    /// Exit 1: `what` says what was being done.
    #[error("{what}: {source}")]
    Failed {
        /// What the command was doing, e.g. "cannot connect to Redis".
        what: String,
        /// Why it failed.
        source: Box<dyn Error + Send + Sync>,
    },
}

impl CommandError {
    /// A permanent fault of the configuration in file `config` (exit 2),
    /// the file named in front of the message.
    pub(crate) fn fault(config: &Path, e: impl Display) -> CommandError {
        CommandError::Invalid(format!("{}: {e}", config.display()))
    }

    /// A failure while running (exit 1).
    pub(crate) fn failed(
        what: impl Into<String>,
        e: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> Self {
        CommandError::Failed {
            what: what.into(),
            source: e.into(),
        }
    }

    /// The process's exit code for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandError::Invalid(_) => 2,
            CommandError::Failed { .. } => 1,
        }
    }
}
