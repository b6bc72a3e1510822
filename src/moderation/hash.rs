//! The keyed hash of member ids (docs/moderation.md): what the record of an
//! erasure and the member index keep instead of the id. SipHash-2-4 with a
//! 128-bit output, keyed by `[admin] erase_key`: a pseudo-random function
//! built for exactly this (short inputs, a secret key), tens of
//! nanoseconds per id, so the write path can afford it for every new member.
//! Without the key nobody can tell which id a hash stands for, even for ids
//! that are easy to enumerate (user numbers).

use std::hash::Hasher as _;

use sha2::{Digest, Sha256};
use siphasher::sip128::{Hasher128, SipHasher24};

/// The key an installation without `[admin] erase_key` hashes with. Such an
/// installation keeps the member index but cannot erase (docs/admin.md):
/// a hash under a known key is no better than the id.
const UNKEYED: &[u8] = b"rankflow: no [admin] erase_key";

/// Hashes member ids under one key.
#[derive(Clone)]
pub struct MemberHasher {
    k0: u64,
    k1: u64,
    keyed: bool,
}

impl std::fmt::Debug for MemberHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberHasher")
            .field("keyed", &self.keyed)
            .finish()
    }
}

impl MemberHasher {
    /// A hasher keyed by `secret` (the SHA-256 of it, so a secret of any
    /// length makes a full 128-bit key), or the unkeyed one without.
    pub fn new(secret: Option<&str>) -> MemberHasher {
        let digest = Sha256::digest(secret.map_or(UNKEYED, str::as_bytes));
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&digest[i..i + 8]);
            u64::from_le_bytes(b)
        };
        MemberHasher {
            k0: word(0),
            k1: word(8),
            keyed: secret.is_some(),
        }
    }

    /// Whether an `erase_key` keys it (erasing needs one).
    pub fn keyed(&self) -> bool {
        self.keyed
    }

    /// The 128-bit keyed hash of `member`.
    pub fn hash(&self, member: &str) -> u128 {
        let mut h = SipHasher24::new_with_keys(self.k0, self.k1);
        h.write(member.as_bytes());
        h.finish128().as_u128()
    }

    /// The hash as 32 lowercase hex digits, as key names and records hold it.
    pub fn hex(&self, member: &str) -> String {
        format!("{:032x}", self.hash(member))
    }

    /// A short fingerprint of the key itself, kept beside the records so a
    /// fleet whose `erase_key` changed can say so instead of silently
    /// missing every record made under the old one. Reveals nothing of
    /// the key (a hash of a fixed text under it).
    pub fn key_id(&self) -> String {
        format!("{:016x}", self.hash("rankflow key id") as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_changes_every_hash_and_the_id_is_not_in_it() {
        let a = MemberHasher::new(Some("a-long-secret-key-0001"));
        let b = MemberHasher::new(Some("a-long-secret-key-0002"));
        assert_eq!(a.hex("u42"), a.hex("u42"));
        assert_ne!(a.hex("u42"), b.hex("u42"));
        assert_ne!(a.hex("u42"), a.hex("u43"));
        assert_eq!(a.hex("u42").len(), 32);
        assert!(!a.hex("u42").contains("u42"));
        assert_ne!(a.key_id(), b.key_id());
        assert!(a.keyed() && !MemberHasher::new(None).keyed());
    }

    /// SipHash-2-4-128's published test vector (key 00..0f, empty input),
    /// so the records stay readable by any SipHash implementation.
    #[test]
    fn it_is_siphash_2_4_128() {
        let mut h =
            SipHasher24::new_with_key(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
        h.write(&[]);
        let got = h.finish128().as_bytes();
        assert_eq!(
            got,
            [
                0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55,
                0x02, 0x93
            ]
        );
    }
}
