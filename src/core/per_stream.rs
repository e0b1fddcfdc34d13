//! State a sink keeps per stream while thousands of streams emit into it at
//! once: the streams hash to independently locked maps, so concurrent
//! streams rarely wait on one another. The diagnosis collector and the
//! metrics sink both keep theirs here.

use std::collections::HashMap;
use std::sync::Mutex;

use super::event::StreamId;

/// Streams hash to this many independently locked maps.
const SHARDS: usize = 64;

/// A `T` per stream, behind sharded locks.
#[derive(Debug)]
pub struct PerStream<T> {
    shards: Vec<Mutex<HashMap<StreamId, T>>>,
}

impl<T> Default for PerStream<T> {
    fn default() -> Self {
        PerStream { shards: (0..SHARDS).map(|_| Mutex::default()).collect() }
    }
}

impl<T> PerStream<T> {
    /// Runs `f` on the map that holds `stream`, locked; `None` when the
    /// lock is poisoned (a sink must not panic in turn).
    pub fn with<R>(&self, stream: StreamId, f: impl FnOnce(&mut HashMap<StreamId, T>) -> R) -> Option<R> {
        let mut streams = self.shards[(stream % SHARDS as u64) as usize].lock().ok()?;
        Some(f(&mut streams))
    }

    /// Takes `stream`'s state out.
    pub fn remove(&self, stream: StreamId) -> Option<T> {
        self.with(stream, |streams| streams.remove(&stream)).flatten()
    }

    /// `f` of every stream's state, in stream order.
    pub fn map<R>(&self, mut f: impl FnMut(StreamId, &T) -> R) -> Vec<R> {
        let mut all: Vec<(StreamId, R)> = Vec::new();
        for shard in &self.shards {
            if let Ok(streams) = shard.lock() {
                all.extend(streams.iter().map(|(stream, state)| (*stream, f(*stream, state))));
            }
        }
        all.sort_by_key(|(stream, _)| *stream);
        all.into_iter().map(|(_, r)| r).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::PerStream;

    #[test]
    fn each_stream_keeps_its_own_state_and_lists_in_order() {
        let counts: PerStream<u32> = PerStream::default();
        for stream in [130, 2, 66, 2] {
            counts.with(stream, |s| *s.entry(stream).or_default() += 1);
        }
        assert_eq!(counts.map(|stream, n| (stream, *n)), [(2, 2), (66, 1), (130, 1)]);
        assert_eq!(counts.remove(2), Some(2));
        assert_eq!(counts.remove(2), None);
    }
}
