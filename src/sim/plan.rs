//! Turning an attempt's steps into a timed plan: the bytes to write, the
//! pauses between them, and how the body ends.
//!
//! Planning renders the whole stream up front (only the endless tails, a
//! forever stall or endless pings, are left to the player), which is what
//! lets a drip or buffer step re-time "the rest of the stream", and lets
//! tests check a scenario's bytes without a socket.

use std::time::Duration;

use bytes::Bytes;

use super::scenario::{Step, Wait};
use super::wire::Renderer;

/// One timed piece of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Timed {
    /// Write these bytes as one body frame.
    Write(Bytes),
    /// Pause.
    Sleep(Duration),
    /// Write `data` in `piece`-byte frames, pausing `every` before each (cut
    /// while playing, so a tiny piece size costs no memory).
    Drip {
        /// Everything to send.
        data: Bytes,
        /// Bytes per frame, at least 1.
        piece: usize,
        /// The pause before each frame.
        every: Duration,
    },
}

/// How a body ends once its timed pieces are played.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ending {
    /// The body ends cleanly (chunked terminator).
    Finish,
    /// Nothing more is sent; the socket stays open until the client leaves.
    Hold,
    /// This keep-alive again and again, forever.
    Pings {
        /// The keep-alive's bytes.
        ping: Bytes,
        /// The pause before each.
        every: Duration,
    },
    /// The connection is closed with a FIN, mid-body.
    Hangup,
    /// The connection is reset.
    Reset,
}

/// A body's full script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    /// What to write and when.
    pub timed: Vec<Timed>,
    /// What happens after.
    pub ending: Ending,
}

/// How rendered bytes reach the wire.
#[derive(Debug, Clone, Copy)]
enum Delivery {
    /// Each event as it is rendered, at its own time.
    Live,
    /// Held, then sent in `bytes`-sized pieces, one every `every`.
    Drip { bytes: usize, every: Duration },
    /// Held, then sent at once after `delay`.
    Buffer { delay: Duration },
}

struct Planner<'a> {
    renderer: &'a mut Renderer,
    timed: Vec<Timed>,
    delivery: Delivery,
    held: Vec<u8>,
}

impl Planner<'_> {
    fn write(&mut self, events: Vec<Bytes>) {
        match self.delivery {
            Delivery::Live => self.timed.extend(events.into_iter().map(Timed::Write)),
            Delivery::Drip { .. } | Delivery::Buffer { .. } => {
                events.iter().for_each(|e| self.held.extend_from_slice(e));
            }
        }
    }

    /// A pause; inside a drip or buffer range the range sets the timing.
    fn sleep(&mut self, pause: Duration) {
        if matches!(self.delivery, Delivery::Live) && !pause.is_zero() {
            self.timed.push(Timed::Sleep(pause));
        }
    }

    /// Sends what a drip or buffer range held, and goes back to live.
    fn release(&mut self) {
        let held = Bytes::from(std::mem::take(&mut self.held));
        match std::mem::replace(&mut self.delivery, Delivery::Live) {
            Delivery::Live => {}
            Delivery::Buffer { delay } => {
                self.sleep(delay);
                if !held.is_empty() {
                    self.timed.push(Timed::Write(held));
                }
            }
            Delivery::Drip { bytes, every } => {
                if !held.is_empty() {
                    self.timed.push(Timed::Drip { data: held, piece: bytes.max(1), every });
                }
            }
        }
    }

    /// Renders with `f` and writes the events.
    fn render(&mut self, f: impl FnOnce(&mut Renderer, &mut Vec<Bytes>)) {
        let mut events = Vec::new();
        f(self.renderer, &mut events);
        self.write(events);
    }

    /// Plays one step; `Some` when the step ends the body.
    fn step(&mut self, step: &Step) -> Option<Ending> {
        match step {
            Step::Preamble => self.render(Renderer::open),
            Step::OpenBlock => self.render(Renderer::open_text),
            Step::Content { text, count, every } => {
                for _ in 0..*count {
                    self.sleep(*every);
                    self.render(|r, out| r.content(text, out));
                }
            }
            Step::Reasoning { text, count, every } => {
                for _ in 0..*count {
                    self.sleep(*every);
                    self.render(|r, out| r.reasoning(text, out));
                }
            }
            Step::Pings { every, lasting: Wait::For(total) } => {
                self.render(Renderer::open);
                let mut elapsed = Duration::ZERO;
                while elapsed + *every <= *total {
                    self.sleep(*every);
                    self.render(|r, out| out.push(r.ping()));
                    elapsed += *every;
                }
                self.sleep(*total - elapsed);
            }
            Step::Pings { every, lasting: Wait::Forever } => {
                self.render(Renderer::open);
                self.release();
                return Some(Ending::Pings { ping: self.renderer.ping(), every: *every });
            }
            Step::Stall(Wait::For(pause)) => self.sleep(*pause),
            Step::Stall(Wait::Forever) => {
                self.release();
                return Some(Ending::Hold);
            }
            Step::Drip { bytes, every } => {
                self.release();
                self.delivery = Delivery::Drip { bytes: *bytes, every: *every };
            }
            Step::Buffer { delay } => {
                self.release();
                self.delivery = Delivery::Buffer { delay: *delay };
            }
            Step::LongLine { bytes, hold } => {
                self.render(|r, out| r.long_line(*bytes, out));
                self.sleep(*hold);
                self.write(vec![Bytes::from_static(b"\n\n")]);
            }
            Step::InvalidUtf8 => self.render(Renderer::invalid_utf8),
            Step::MissingData => self.render(Renderer::missing_data),
            Step::Error { kind, message, failed } => {
                self.render(|r, out| r.error(*kind, message.as_deref(), *failed, out));
                self.release();
                return Some(Ending::Finish);
            }
            Step::End => return Some(self.finish()),
            Step::Close => {
                self.release();
                return Some(Ending::Finish);
            }
            Step::Hangup => {
                self.release();
                return Some(Ending::Hangup);
            }
            Step::Reset => {
                self.release();
                return Some(Ending::Reset);
            }
        }
        None
    }

    fn finish(&mut self) -> Ending {
        self.render(Renderer::finish);
        self.release();
        Ending::Finish
    }
}

/// Plans a streamed body from `steps`, rendering with `renderer`. Steps
/// after one that ends the body are ignored (scenario checking rejects them).
pub(super) fn plan(steps: &[Step], renderer: &mut Renderer) -> Plan {
    let mut planner = Planner { renderer, timed: Vec::new(), delivery: Delivery::Live, held: Vec::new() };
    let ending = steps.iter().find_map(|step| planner.step(step)).unwrap_or_else(|| planner.finish());
    Plan { timed: planner.timed, ending }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::Dialect;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn plan_for(steps: &[Step]) -> Plan {
        plan(steps, &mut Renderer::new(Dialect::OpenAiChat, "m"))
    }

    fn bytes_of(plan: &Plan) -> Vec<u8> {
        plan.timed
            .iter()
            .flat_map(|t| match t {
                Timed::Write(b) | Timed::Drip { data: b, .. } => b.to_vec(),
                Timed::Sleep(_) => Vec::new(),
            })
            .collect()
    }

    #[test]
    fn empty_steps_finish_normally() {
        let plan = plan_for(&[]);
        assert_eq!(plan.ending, Ending::Finish);
        assert!(bytes_of(&plan).ends_with(b"data: [DONE]\n\n"));
    }

    #[test]
    fn content_waits_before_each_delta() {
        let plan = plan_for(&[Step::Content { text: "a".into(), count: 2, every: ms(10) }, Step::Close]);
        let shape: Vec<bool> = plan.timed.iter().map(|t| matches!(t, Timed::Sleep(_))).collect();
        // sleep, (opening chunk, delta), sleep, delta; no terminal events.
        assert_eq!(shape, [true, false, false, true, false]);
        assert_eq!(plan.ending, Ending::Finish);
        assert!(!bytes_of(&plan).ends_with(b"[DONE]\n\n"));
    }

    #[test]
    fn drip_splits_the_rest_and_owns_its_timing() {
        let steps = [
            Step::Drip { bytes: 7, every: ms(5) },
            Step::Content { text: "a".into(), count: 3, every: ms(100) },
            Step::Stall(Wait::For(ms(1000))),
        ];
        let plan = plan_for(&steps);
        let live = plan_for(&steps[1..]);
        assert_eq!(bytes_of(&plan), bytes_of(&live));
        assert!(matches!(plan.timed.as_slice(), [Timed::Drip { piece: 7, every, .. }] if *every == ms(5)));
    }

    #[test]
    fn buffer_holds_then_writes_once() {
        let plan = plan_for(&[
            Step::Buffer { delay: ms(300) },
            Step::Content { text: "a".into(), count: 5, every: ms(50) },
            Step::Stall(Wait::Forever),
        ]);
        assert_eq!(plan.timed.len(), 2);
        assert_eq!(plan.timed[0], Timed::Sleep(ms(300)));
        assert_eq!(plan.ending, Ending::Hold);
    }

    #[test]
    fn pings_fill_their_duration() {
        let plan = plan_for(&[
            Step::Preamble,
            Step::Pings { every: ms(100), lasting: Wait::For(ms(350)) },
            Step::Pings { every: ms(20), lasting: Wait::Forever },
        ]);
        let pings = plan.timed.iter().filter(|t| **t == Timed::Write(Bytes::from_static(b": keep-alive\n\n"))).count();
        assert_eq!(pings, 3);
        assert_eq!(plan.timed.last(), Some(&Timed::Sleep(ms(50))));
        assert_eq!(plan.ending, Ending::Pings { ping: Bytes::from_static(b": keep-alive\n\n"), every: ms(20) });
    }

    #[test]
    fn long_line_is_held_unterminated() {
        let plan = plan_for(&[Step::LongLine { bytes: 1000, hold: ms(40) }, Step::Reset]);
        assert!(matches!(&plan.timed[1], Timed::Write(b) if b.len() == 1006 && !b.contains(&b'\n')));
        assert_eq!(plan.timed[2], Timed::Sleep(ms(40)));
        assert_eq!(plan.timed[3], Timed::Write(Bytes::from_static(b"\n\n")));
        assert_eq!(plan.ending, Ending::Reset);
    }
}
