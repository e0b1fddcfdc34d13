//! Playing a [`Plan`] as an HTTP response body: each write is its own body
//! frame, pauses are real time, and a hangup or reset is handed to the
//! connection, the only place that can close the socket.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::mpsc::UnboundedSender;

use super::plan::{Ending, Plan, Timed};

/// The body type of every simulator response.
pub(super) type SimBody = UnsyncBoxBody<Bytes, Infallible>;

/// How the connection must be torn down mid-body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Abort {
    /// Close with a FIN, leaving the chunked body unterminated.
    Hangup,
    /// Close with SO_LINGER 0, which sends an RST.
    Reset,
}

/// Where the player is in its plan.
struct Player {
    timed: std::vec::IntoIter<Timed>,
    /// A drip in progress: what is left, the piece size and the pause.
    drip: Option<(Bytes, usize, Duration)>,
    ending: Ending,
    abort: UnboundedSender<Abort>,
}

impl Player {
    /// The next frame, or `None` when the body ends cleanly. Never returns
    /// for a hold, endless pings or a torn-down connection: the connection
    /// is dropped around it.
    async fn next_frame(mut self) -> Option<(Result<Frame<Bytes>, Infallible>, Player)> {
        loop {
            if let Some((rest, piece, every)) = self.drip.take() {
                tokio::time::sleep(every).await;
                let mut rest = rest;
                let frame = rest.split_to(piece.min(rest.len()));
                if !rest.is_empty() {
                    self.drip = Some((rest, piece, every));
                }
                return Some((Ok(Frame::data(frame)), self));
            }
            match self.timed.next() {
                Some(Timed::Write(bytes)) => return Some((Ok(Frame::data(bytes)), self)),
                Some(Timed::Sleep(pause)) => tokio::time::sleep(pause).await,
                Some(Timed::Drip { data, piece, every }) => self.drip = Some((data, piece, every)),
                None => break,
            }
        }
        match &self.ending {
            Ending::Finish => None,
            Ending::Pings { ping, every } => {
                tokio::time::sleep(*every).await;
                let ping = ping.clone();
                Some((Ok(Frame::data(ping)), self))
            }
            Ending::Hold => std::future::pending().await,
            Ending::Hangup | Ending::Reset => {
                let abort = if self.ending == Ending::Reset { Abort::Reset } else { Abort::Hangup };
                // An error only means the connection is already gone.
                let _ = self.abort.send(abort);
                std::future::pending().await
            }
        }
    }
}

/// The body that plays `plan`; a hangup or reset is sent on `abort`.
pub(super) fn body(plan: Plan, abort: UnboundedSender<Abort>) -> SimBody {
    let player = Player { timed: plan.timed.into_iter(), drip: None, ending: plan.ending, abort };
    StreamBody::new(stream::unfold(player, Player::next_frame)).boxed_unsync()
}
