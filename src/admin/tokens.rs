//! The named bearer tokens of `[admin] tokens` (docs/admin.md) and the one
//! question asked of them: which name, if any, does a presented token
//! belong to. Compared in constant time, so that the time an answer takes
//! says nothing about how much of a token was right.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::AdminConfig;

/// The configured tokens, kept as SHA-256 digests: comparing digests of
/// equal length hides the tokens' lengths too, and the tokens themselves
/// are not held in memory past start-up by this type.
pub struct Tokens {
    digests: Vec<(String, [u8; 32])>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.digests.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Tokens").field("names", &names).finish()
    }
}

impl Tokens {
    /// The tokens of `[admin]`; none (the admin API off) without any.
    pub(crate) fn new(config: &AdminConfig) -> Tokens {
        Tokens {
            digests: config
                .tokens
                .iter()
                .map(|(name, token)| (name.clone(), digest(token.expose())))
                .collect(),
        }
    }

    /// No tokens: the admin API is not served (its routes answer 404).
    pub fn none() -> Tokens {
        Tokens {
            digests: Vec::new(),
        }
    }

    /// Whether any token is configured.
    pub fn enabled(&self) -> bool {
        !self.digests.is_empty()
    }

    /// The name of the token `presented` is, if any. Every configured
    /// token is compared, in constant time, whatever the outcome.
    pub fn name_of(&self, presented: &str) -> Option<&str> {
        let wanted = digest(presented);
        let mut found = None;
        for (name, d) in &self.digests {
            if bool::from(d.ct_eq(&wanted)) {
                found = Some(name.as_str());
            }
        }
        found
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        let config: AdminConfig = toml::from_str(
            "tokens = { ops = \"ops-0123456789abcdef\", support = \"sup-0123456789abcdef\" }",
        )
        .expect("admin table");
        Tokens::new(&config)
    }

    #[test]
    fn a_token_names_its_owner_and_nothing_else_does() {
        let t = tokens();
        assert!(t.enabled());
        assert_eq!(t.name_of("ops-0123456789abcdef"), Some("ops"));
        assert_eq!(t.name_of("sup-0123456789abcdef"), Some("support"));
        // A prefix, a longer string, another case, nothing: no one.
        for wrong in [
            "ops-0123456789abcde",
            "ops-0123456789abcdef0",
            "OPS-0123456789ABCDEF",
            "",
        ] {
            assert_eq!(t.name_of(wrong), None, "{wrong:?}");
        }
        assert!(!format!("{t:?}").contains("0123"), "{t:?}");
        assert!(!Tokens::none().enabled());
        assert_eq!(Tokens::none().name_of(""), None);
    }
}
