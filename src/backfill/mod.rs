//! Shadow boards' backfill (docs/rebuilds.md). Each shadow board is
//! applied by a consumer loop of its own, in a consumer group of its own
//! (`<group_id>.backfill.<board>`), that reads the topics from the start of
//! its history (where no position of its own is recorded) and applies each
//! message to the shadow alone; the live consumers apply every other
//! board. Exactly once comes from the shadow's own offset fences, as for
//! any board: the replay and the live loops never write the same instance.
//! Once the replay has reached where the live consumers were when it
//! began, the same loop goes on following new messages. [`progress`]
//! reports how far it is.

pub(crate) mod progress;
pub(crate) mod start;
pub(crate) mod verdicts;

use crate::config::KafkaConfig;

/// The consumer group of a shadow board's backfill.
pub(crate) fn group_id(live_group: &str, board: &str) -> String {
    format!("{live_group}.backfill.{board}")
}

/// The live consumer's Kafka settings, in the backfill's group.
pub(crate) fn kafka_config(live: &KafkaConfig, board: &str) -> KafkaConfig {
    let mut kafka = live.clone();
    kafka.group_id = group_id(&live.group_id, board);
    kafka
}
