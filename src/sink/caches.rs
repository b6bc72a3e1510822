//! What this consumer remembers having written, so that a batch does not
//! send it again: key expiries, due-set registrations of archived periods,
//! scope-registry entries, member-index entries and window-registry
//! entries. All five are hints: forgetting them only
//! costs writes sent again (each is idempotent), so when Redis is known to
//! have lost state (its epoch moved) they are forgotten together.

use super::due::Registered;
use super::expiry::ExpiryCache;
use super::members;
use super::scopes::ScopeCache;

/// The caches of one store epoch.
#[derive(Debug, Default)]
pub(crate) struct Caches {
    /// Key expiries sent.
    pub(crate) expiries: ExpiryCache,
    /// Archived periods registered in the due set.
    pub(crate) due: Registered,
    /// Scope values registered in the views' scope registries.
    pub(crate) scopes: ScopeCache,
    /// (member, instance) pairs registered in the member index.
    pub(crate) members: members::Registered,
    /// Window instances registered for the background trimmer.
    pub(crate) windows: Registered,
    /// The store's state epoch the entries belong to.
    epoch: u64,
}

impl Caches {
    /// Forgets everything if the store's epoch moved (Redis lost its state).
    pub(crate) fn sync_epoch(&mut self, epoch: u64) {
        if epoch != self.epoch {
            self.forget();
            self.epoch = epoch;
        }
    }

    /// Forgets everything: every write is sent again once.
    pub(crate) fn forget(&mut self) {
        self.expiries.clear();
        self.due.clear();
        self.scopes.clear();
        self.members.clear();
        self.windows.clear();
    }
}
