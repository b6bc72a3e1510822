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
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("{location}: {message}")]
    Invalid { location: String, message: String },
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
