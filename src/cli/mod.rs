//! The command line (docs/cli.md): `run`, `check`, `produce`, `top`,
//! `archive`. The arguments ([`args`]), the commands run on a loaded
//! configuration ([`commands`], whose [`execute`] is all the binary calls),
//! their failures and exit codes ([`error`]), and what they print
//! ([`describe`] for `check`, [`render`] for `top` and `archive`). This
//! file only declares and re-exports.

pub(crate) mod args;
pub(crate) mod commands;
pub(crate) mod describe;
pub(crate) mod error;
pub(crate) mod render;

pub use args::{ArchiveArgs, ProduceArgs, TopArgs};
pub use args::{Cli, Command};
pub use commands::execute;
pub use error::CommandError;
