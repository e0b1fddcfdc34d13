//! What a recorded attempt's response is made of when it is played again:
//! the bytes or events its body comes from, how the body ends, and the
//! recorded failure text as the failure carried it. Decided here once for
//! both players of a recording — the what-if's recorded upstream
//! ([`super::upstream`]) and `sim --from-run`'s server
//! ([`crate::sim`]) — which each once decided it in their own copy, and
//! drifted (an error body replayed as filler, a truncated raw body replayed
//! as a broken stream).

use super::recording::{RecordedAttempt, RecordedResponse};
use crate::core::event::{AttemptEnd, RecordedBody};
use crate::core::failure::{Failure, TransportKind};

/// Where a recorded body's bytes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodySource<'a> {
    /// A response that is not an event stream (an error, an answer that
    /// does not stream): the raw body when it was recorded in full, else
    /// the start of the error body the recording kept (redacted, at most
    /// 4 KiB; see [`crate::core::evidence`]). The classifier's body rules
    /// read these bytes in replay as they read the live ones.
    Fixed(&'a [u8]),
    /// An event stream recorded raw and in full: its bytes as they came,
    /// for the dialect's real decoder.
    Raw(&'a [u8]),
    /// An event stream known by its recorded events: their texts under
    /// `RECORD_BODIES=text`, else their lengths. A raw body cut at
    /// `RECORD_BODY_MAX_KB` is known this way too: its bytes stop before
    /// the stream said it was done.
    Events,
}

/// How a recorded body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// It ends as the recording shows (the stream's end, an error body's
    /// end, an in-stream error or a malformed event).
    Ends,
    /// The connection broke.
    Breaks(TransportKind),
    /// The recording stops while the attempt still ran: our timer gave up
    /// on it, the call was cancelled, or nothing says how it ended.
    Abandoned,
}

impl RecordedResponse {
    /// Whether the response was read as an event stream: a 2xx with an
    /// event-stream content type, as the governor decides it.
    pub fn is_event_stream(&self) -> bool {
        crate::core::upstream::is_event_stream(self.status, self.content_type.as_deref())
    }
}

impl RecordedAttempt {
    /// Where its body's bytes come from; `None` when no response came.
    pub fn body_source(&self) -> Option<BodySource<'_>> {
        let response = self.response.as_ref()?;
        let whole_raw = match &self.body {
            Some(RecordedBody::Raw { bytes, truncated: false }) => Some(bytes.as_slice()),
            _ => None,
        };
        Some(match (response.is_event_stream(), whole_raw) {
            (false, raw) => BodySource::Fixed(raw.or(response.error_body.as_deref().map(str::as_bytes)).unwrap_or(&[])),
            (true, Some(raw)) => BodySource::Raw(raw),
            (true, None) => BodySource::Events,
        })
    }

    /// How its body (or, without a response, its connection) ends.
    pub fn body_end(&self) -> BodyEnd {
        match &self.ended {
            None | Some((_, AttemptEnd::Timer { .. } | AttemptEnd::Cancelled)) => BodyEnd::Abandoned,
            Some((_, AttemptEnd::Transport { kind })) => BodyEnd::Breaks(*kind),
            Some((
                _,
                AttemptEnd::Done | AttemptEnd::Status { .. } | AttemptEnd::InStream { .. } | AttemptEnd::Malformed,
            )) => BodyEnd::Ends,
        }
    }
}

impl RecordedAttempt {
    /// The message its failure, of `shape` (with an empty message),
    /// carried; `None` when no failure was recorded.
    pub fn failure_message(&self, shape: &Failure) -> Option<String> {
        self.message.as_deref().map(|description| recorded_message(shape, description))
    }
}

/// The message a failure of `shape` (with an empty message) carried, from
/// the description it was recorded with: the recording keeps a failure's
/// description ("connection reset: peer reset"), and a failure rebuilt
/// from it would describe itself again ("connection reset: connection
/// reset: peer reset").
fn recorded_message(shape: &Failure, description: &str) -> String {
    let prefix = shape.to_string();
    description.strip_prefix(prefix.as_str()).unwrap_or(description).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::core::failover::Target;

    fn attempt(status: u16, content_type: &str, body: Option<RecordedBody>, end: AttemptEnd) -> RecordedAttempt {
        RecordedAttempt {
            ordinal: 1,
            target: Target::new("p", "m"),
            started: Duration::ZERO,
            response: Some(RecordedResponse {
                at: Duration::from_millis(5),
                status,
                content_type: Some(content_type.to_owned()),
                headers: Vec::new(),
                error_body: (status >= 400).then(|| "{\"error\":{\"code\":\"insufficient_quota\"}}".to_owned()),
                error_body_cut: false,
            }),
            chunks: Vec::new().into(),
            events: Vec::new().into(),
            ended: Some((Duration::from_millis(9), end)),
            stop_reason: None,
            message: None,
            body,
        }
    }

    /// Review D1: an error body comes from the recording whatever bodies
    /// were recorded; review D2: a raw stream cut short is played from its
    /// events.
    #[test]
    fn each_body_comes_from_what_the_recording_kept_whole() {
        let quota = b"{\"error\":{\"code\":\"insufficient_quota\"}}".as_slice();
        let text = Some(RecordedBody::Text { texts: Vec::new(), truncated: false });
        let status = AttemptEnd::Status { status: 429 };
        assert_eq!(
            attempt(429, "application/json", text, status.clone()).body_source(),
            Some(BodySource::Fixed(quota))
        );
        let raw = |bytes: &[u8], truncated| Some(RecordedBody::Raw { bytes: bytes.to_vec(), truncated });
        let raw_error = attempt(429, "application/json", raw(b"{\"whole\":1}", false), status);
        assert_eq!(raw_error.body_source(), Some(BodySource::Fixed(b"{\"whole\":1}".as_slice())));
        let sse = "text/event-stream; charset=utf-8";
        let whole = attempt(200, sse, raw(b"data: x\n\n", false), AttemptEnd::Done);
        assert_eq!(whole.body_source(), Some(BodySource::Raw(b"data: x\n\n".as_slice())));
        assert_eq!(attempt(200, sse, raw(b"data: x", true), AttemptEnd::Done).body_source(), Some(BodySource::Events));
        // A 200 that is not an event stream is read whole, as the governor does.
        assert_eq!(
            attempt(200, "application/json", None, AttemptEnd::Done).body_source(),
            Some(BodySource::Fixed(&[]))
        );
    }

    #[test]
    fn a_recorded_description_gives_back_the_message_it_described() {
        let reset = Failure::Transport { kind: TransportKind::Reset, message: String::new() };
        let described = Failure::Transport { kind: TransportKind::Reset, message: "peer reset".into() }.to_string();
        assert_eq!(recorded_message(&reset, &described), "peer reset");
        let in_stream = Failure::InStream { code: Some("rate_limit_error".into()), message: String::new() };
        assert_eq!(
            recorded_message(&in_stream, "in-stream error rate_limit_error: Rate limit reached"),
            "Rate limit reached"
        );
        assert_eq!(recorded_message(&reset, "something else"), "something else");
    }
}
