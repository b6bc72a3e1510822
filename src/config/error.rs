//! What can be wrong with the configuration ([`ConfigError`]), each case
//! saying where: file and line, environment variable, setting, or board
//! and field. A leaf: the loader (`mod.rs`), the environment overrides
//! (`env.rs`) and the cross-field checks (`validate.rs`) all produce it.

use std::path::PathBuf;

use crate::board::BoardError;

/// Everything that can be wrong with the configuration; each message says
/// where (file and line, environment variable, setting, or board and field).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file could not be read (missing, unreadable).
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file, as given with `-c`/`--config` or `RANKFLOW_CONFIG`.
        path: PathBuf,
        /// Why reading it failed.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or a value does not fit its setting: a
    /// wrong type, an unknown key, a value its typed setting refuses.
    #[error("{path}: {source}")]
    Parse {
        /// The file the message names.
        path: PathBuf,
        /// The TOML error; it names the key (and, without environment
        /// overrides, the line).
        source: Box<toml::de::Error>,
    },
    /// Like [`ConfigError::Parse`], with the secrets of `[admin]` masked
    /// in the message (which quotes the line at fault).
    #[error("{path}: {message}")]
    Masked {
        /// The file the message names.
        path: PathBuf,
        /// The TOML error's message, secrets replaced by `***`.
        message: String,
    },
    /// A `RANKFLOW_*` environment override cannot be used: not a setting,
    /// or not a value of the setting's type.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable's name; `RANKFLOW_*` when the file with its
        /// overrides applied could not be written back as TOML.
        var: String,
        /// What is wrong with it.
        message: String,
    },
    /// A value or a combination of values breaks a rule of
    /// docs/configuration.md: a setting, a board or one of its rules.
    #[error("{location}: {message}")]
    Invalid {
        /// Where, as the message starts: a setting (``setting `redis.url` ``),
        /// a board and field (``board `gifts` (#1), field `score` ``), a table.
        location: String,
        /// What is wrong there.
        message: String,
    },
}

impl ConfigError {
    pub(crate) fn invalid(location: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            location: location.into(),
            message: message.into(),
        }
    }

    /// For a setting: `setting `redis.url`: ...`.
    pub(crate) fn setting(key: &str, message: impl Into<String>) -> Self {
        ConfigError::invalid(format!("setting `{key}`"), message)
    }
}

impl From<BoardError> for ConfigError {
    fn from(e: BoardError) -> Self {
        match e {
            BoardError::Invalid { location, message } => ConfigError::Invalid { location, message },
            e @ BoardError::KeyPrefix(_) => ConfigError::setting("redis.key_prefix", e.to_string()),
            e @ BoardError::NoBoards => ConfigError::invalid("[[board]]", e.to_string()),
        }
    }
}
