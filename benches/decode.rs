//! Decode cost per event: the typed decode (`Decoder::decode`, the hot
//! path) against the generic one it replaced (`Decoder::decode_generic`:
//! a `serde_json::Value` through the compiled JSON Schemas), in the same
//! run, on the pipeline benchmark's gift events (the producer's generator:
//! 100,000 senders, 1,000 receivers, Zipf 1.1), plus score and play events
//! for reference. Both decodes must give equal events before timing.
//!
//! Rounds alternate old and new so drift on a shared machine hits both;
//! the figure is the best round. Run with `cargo bench --bench decode`.

use std::error::Error;
use std::hint::black_box;
use std::time::Instant;

use rankflow::event::{Decoder, EventType};
use rankflow::produce::{Generator, Options};

const EVENTS: usize = 100_000;
const ROUNDS: usize = 7;

fn payloads(kind: EventType) -> Result<Vec<Vec<u8>>, Box<dyn Error>> {
    let mut generator = Generator::new(&Options {
        brokers: String::new(),
        topic: String::new(),
        events: 0,
        rate: 0,
        members: 100_000,
        receivers: 1_000,
        games: 20,
        types: vec![kind],
        skew: 1.1,
        key: Default::default(),
        seed: 42,
        client: Vec::new(),
    })?;
    let ts = 1_763_700_000_000;
    Ok((0..EVENTS)
        .map(|i| generator.next(ts + i as i64).1.into_bytes())
        .collect())
}

/// Nanoseconds per event of one pass of `decode` over `events`.
fn pass(
    events: &[Vec<u8>],
    decode: &dyn Fn(&[u8]) -> Result<rankflow::event::Event, rankflow::event::DecodeError>,
) -> Result<f64, Box<dyn Error>> {
    let start = Instant::now();
    for p in events {
        black_box(decode(black_box(p))?);
    }
    Ok(start.elapsed().as_nanos() as f64 / events.len() as f64)
}

fn main() -> Result<(), Box<dyn Error>> {
    let decoder = Decoder::new(64 * 1024)?;
    println!("decode: {EVENTS} events per type, best of {ROUNDS} alternating rounds, ns/event");
    println!(
        "{:<6} {:>14} {:>12} {:>8}",
        "type", "generic (old)", "typed (new)", "ratio"
    );
    for kind in EventType::ALL {
        let events = payloads(kind)?;
        for p in &events {
            let (t, g) = (decoder.decode(p)?, decoder.decode_generic(p)?);
            if (t.kind, t.event_id(), t.ts, &t.fields) != (g.kind, g.event_id(), g.ts, &g.fields) {
                return Err(format!("decodes differ on {}", String::from_utf8_lossy(p)).into());
            }
        }
        let (mut old, mut new) = (f64::MAX, f64::MAX);
        for _ in 0..ROUNDS {
            old = old.min(pass(&events, &|p| decoder.decode_generic(p))?);
            new = new.min(pass(&events, &|p| decoder.decode(p))?);
        }
        println!(
            "{:<6} {old:>14.0} {new:>12.0} {:>7.2}x",
            kind.name(),
            old / new
        );
    }
    Ok(())
}
