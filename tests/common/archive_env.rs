//! A Redis and a private PostgreSQL behind rankflow's HTTP API, with the
//! reader able to fall back to the archive: what the tests of archived
//! reads and rank styles start from. Boards are written directly
//! ([`Direct`]) and periods archived with [`Archive::copy`].

use std::sync::{Arc, OnceLock};

use rankflow::archive::copy::Archive;
use rankflow::archive::read::ArchiveReader;
use rankflow::archive::schema;

use super::direct::Direct;
use super::postgres::Postgres;
use super::{Redis, unique};

pub struct ArchiveEnv {
    pub redis: Redis,
    pub pg: Postgres,
    pub prefix: String,
    /// Base URL of the API.
    pub base: String,
    /// A migrated connection to write archived periods with.
    pub writer: Archive,
    _direct: Direct,
}

impl ArchiveEnv {
    /// `boards` gets the PostgreSQL URL and returns the `[archive]` and
    /// `[[board]]` tables; `now` is the readers' clock.
    pub async fn start(name: &str, boards: fn(&str) -> String, now: i64) -> ArchiveEnv {
        let redis = Redis::start();
        let pg = Postgres::start();
        let mut writer = Archive::connect(&pg.url()).await.expect("connect");
        schema::migrate(writer.client()).await.expect("migrate");
        let prefix = unique(name);
        let direct = Direct::new(&redis.url(), &prefix, &boards(&pg.url()), now).await;
        let mut reader = direct.reader();
        reader.archive = Some(ArchiveReader::new(&pg.url()).expect("archive url"));
        let slot = Arc::new(OnceLock::new());
        let _ = slot.set(reader);
        let base = direct.serve(slot).await;
        ArchiveEnv {
            redis,
            pg,
            prefix,
            base,
            writer,
            _direct: direct,
        }
    }
}
