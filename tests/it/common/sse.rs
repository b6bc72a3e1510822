//! A minimal Server-Sent Events client for the tests of live views
//! (`streams`, `fanout`, `overtaken`): opens a stream, splits the raw bytes
//! into blocks at blank lines and blocks into `id:`, `event:` and `data:`
//! (JSON), so the wire format itself is what the tests read.

use std::time::{Duration, Instant};

use serde_json::Value;

/// One SSE event as the wire carried it.
#[derive(Debug, Clone)]
pub struct Ev {
    pub id: u64,
    pub event: Option<String>,
    pub data: Value,
}

/// What arrived next on a stream.
#[derive(Debug)]
pub enum Item {
    Event(Ev),
    /// A `:` comment block (heartbeat).
    Comment,
    /// The server ended the stream.
    End,
    /// Nothing within the time asked for.
    Quiet,
}

/// A minimal SSE reader over a streaming HTTP response: splits the bytes
/// into lines and lines into blocks at blank lines.
pub struct Stream {
    resp: reqwest::Response,
    buf: Vec<u8>,
    ended: bool,
}

impl Stream {
    pub async fn open(url: &str, last_event_id: Option<u64>) -> Stream {
        let mut req = reqwest::Client::new().get(url);
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().await.expect("stream request");
        assert_eq!(resp.status().as_u16(), 200, "{url}");
        let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert_eq!(ct, "text/event-stream", "{url}");
        Stream {
            resp,
            buf: Vec::new(),
            ended: false,
        }
    }

    /// The next complete block, if one arrives within `within`.
    pub async fn next(&mut self, within: Duration) -> Item {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(block) = self.take_block() {
                return parse_block(&block);
            }
            if self.ended {
                return Item::End;
            }
            match tokio::time::timeout_at(deadline, self.resp.chunk()).await {
                Err(_) => return Item::Quiet,
                Ok(Ok(Some(bytes))) => self.buf.extend_from_slice(&bytes),
                Ok(Ok(None)) | Ok(Err(_)) => self.ended = true,
            }
        }
    }

    /// The next event (skipping heartbeats) within `within`; panics if
    /// none or if the stream ends.
    pub async fn event(&mut self, within: Duration, what: &str) -> Ev {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Item::Event(e) => return e,
                Item::Comment => continue,
                other => panic!("{what}: expected an event within {within:?}, got {other:?}"),
            }
        }
    }

    /// Events until one satisfies `ok`, within `within`.
    pub async fn event_until(
        &mut self,
        within: Duration,
        what: &str,
        ok: impl Fn(&Ev) -> bool,
    ) -> Ev {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let e = self.event(left, what).await;
            if ok(&e) {
                return e;
            }
        }
    }

    fn take_block(&mut self) -> Option<String> {
        let text = String::from_utf8_lossy(&self.buf).to_string();
        let end = text.find("\n\n")?;
        let block = text[..end].to_string();
        self.buf.drain(..end + 2);
        Some(block)
    }
}

pub fn parse_block(block: &str) -> Item {
    let (mut id, mut event, mut data) = (None, None, Vec::new());
    for line in block.lines() {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = Some(value.parse::<u64>().expect("numeric id")),
            "event" => event = Some(value.to_string()),
            "data" => data.push(value.to_string()),
            other => panic!("unexpected SSE field {other:?} in {block:?}"),
        }
    }
    if data.is_empty() {
        return Item::Comment;
    }
    let data = serde_json::from_str(&data.join("\n")).expect("event data is JSON");
    Item::Event(Ev {
        id: id.expect("every event has an id"),
        event,
        data,
    })
}
