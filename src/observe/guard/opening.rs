//! What of a guarded stream's opening the agent has, so that each start
//! event reaches it once however many attempts open the stream, and a
//! retried attempt's events name what the agent has.
//!
//! [`Had`] notes the start events the agent gets, by name (only those few
//! events are read): Anthropic's `message_start` and each
//! `content_block_start` index; Responses' `response.created`,
//! `.in_progress` and `.queued`, each `output_item.added` (by
//! `output_index`, with its item id) and each `content_part.added` or
//! `reasoning_summary_part.added` (by output and part index); for chat,
//! that an event went (its first is the role chunk).
//!
//! [`Follow`] is a retried attempt after the agent had events: until the
//! attempt's first output (reasoning counts, as it commits a guarded
//! stream: `TimerSettings::reasoning_commits`) a start event the agent has
//! is dropped, a chat chunk with nothing in it but the role too. A
//! Responses retry names its response and items afresh and numbers its
//! events from 0, so its ids are mapped to the agent's (`item_id`,
//! `item.id`, `response.id`, in every event that names one) and, where its
//! `sequence_number` would not go past the agent's last, it is moved on.
//! Once the first output went and nothing needs renaming or renumbering
//! the follow is over, and the attempt's events go on as they came.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use crate::core::event::EventClass;
use crate::core::upstream::{Decoded, Decoder};
use crate::providers::Dialect;

/// The opening events of a message, by name, in the dialects that name
/// them.
const OPENINGS: [&str; 4] = ["message_start", "response.created", "response.in_progress", "response.queued"];

/// What the agent has of a stream's opening.
#[derive(Debug, Default)]
pub(super) struct Had {
    /// The opening events it got, by name (chat: `""`, its first event).
    openings: Vec<&'static str>,
    /// Anthropic: the content block indices started.
    blocks: Vec<u64>,
    /// Responses: the output items added, by `output_index`, with their
    /// ids.
    items: Vec<(u64, String)>,
    /// Responses: the parts added: a reasoning summary's or not, the
    /// `output_index` and the part's index.
    parts: Vec<(bool, u64, u64)>,
    /// Responses: the response's id.
    response: Option<String>,
}

/// The fields of a start event that say what it starts (any other is
/// passed over).
#[derive(Deserialize)]
struct Start<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(default)]
    content_index: Option<u64>,
    #[serde(default)]
    summary_index: Option<u64>,
    #[serde(default)]
    sequence_number: Option<u64>,
    #[serde(default, borrow)]
    item: Option<Named<'a>>,
    #[serde(default, borrow)]
    response: Option<Named<'a>>,
}

/// An object's `id`.
#[derive(Deserialize)]
struct Named<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
}

/// What a start event is.
enum Starts {
    /// Not a start event.
    Nothing,
    /// One of [`OPENINGS`].
    Opening(&'static str),
    /// An Anthropic content block, by index.
    Block(u64),
    /// A Responses output item, by `output_index`, with its id.
    Item(u64, String),
    /// A Responses part: a reasoning summary's or not, its output index
    /// and its own.
    Part(bool, u64, u64),
}

/// What a start event (`name`, `data`) of `dialect` starts; only the few
/// start events are parsed.
fn starts(dialect: Dialect, name: &str, data: &str) -> (Starts, Option<String>) {
    let parsed = || serde_json::from_str::<Start<'_>>(data).ok();
    let id = |named: Option<Named<'_>>| named.and_then(|n| n.id).map(Cow::into_owned);
    let starts = match (dialect, name) {
        (Dialect::OpenAiChat, _) => Starts::Opening(""),
        (Dialect::AnthropicMessages, "content_block_start") => match parsed().and_then(|s| s.index) {
            Some(index) => Starts::Block(index),
            None => Starts::Nothing,
        },
        (Dialect::OpenAiResponses, "response.created" | "response.in_progress" | "response.queued") => {
            let opening = OPENINGS.iter().find(|o| **o == name).copied().unwrap_or_default();
            return (Starts::Opening(opening), parsed().and_then(|s| id(s.response)));
        }
        (Dialect::OpenAiResponses, "response.output_item.added") => match parsed() {
            Some(Start { output_index: Some(at), item, .. }) => Starts::Item(at, id(item).unwrap_or_default()),
            _ => Starts::Nothing,
        },
        (Dialect::OpenAiResponses, "response.content_part.added" | "response.reasoning_summary_part.added") => {
            let summary = name == "response.reasoning_summary_part.added";
            match parsed() {
                Some(Start { output_index: Some(at), content_index: Some(part), .. }) if !summary => {
                    Starts::Part(false, at, part)
                }
                Some(Start { output_index: Some(at), summary_index: Some(part), .. }) if summary => {
                    Starts::Part(true, at, part)
                }
                _ => Starts::Nothing,
            }
        }
        (_, "message_start") => Starts::Opening(OPENINGS[0]),
        _ => Starts::Nothing,
    };
    (starts, None)
}

impl Had {
    /// Notes an event (`name`, `data`) of `dialect` the agent got.
    pub(super) fn note(&mut self, dialect: Dialect, name: &str, data: &str) {
        // Chat's first event is all that is noted of it: nothing is read.
        if dialect == Dialect::OpenAiChat {
            if self.openings.is_empty() {
                self.openings.push("");
            }
            return;
        }
        match starts(dialect, name, data) {
            (Starts::Nothing, _) => {}
            (Starts::Opening(opening), response) => {
                if !self.openings.contains(&opening) {
                    self.openings.push(opening);
                }
                if self.response.is_none() {
                    self.response = response;
                }
            }
            (Starts::Block(index), _) => self.blocks.push(index),
            (Starts::Item(at, id), _) => self.items.push((at, id)),
            (Starts::Part(summary, at, part), _) => self.parts.push((summary, at, part)),
        }
    }

    /// Whether the agent has what `name`, `data` (decoded as `decoded`)
    /// starts; a Responses item or response it has under another id maps
    /// that id to its own in `ids`.
    fn has(
        &self,
        dialect: Dialect,
        (name, data): (&str, &str),
        decoded: &[Decoded],
        ids: &mut Vec<(String, String)>,
    ) -> bool {
        let mut maps = |theirs: Option<String>, ours: Option<&String>| {
            if let (Some(theirs), Some(ours)) = (theirs, ours)
                && theirs != *ours
                && !ids.iter().any(|(t, _)| *t == theirs)
            {
                ids.push((theirs, ours.clone()));
            }
        };
        match starts(dialect, name, data) {
            // Chat has no blocks: a chunk with no text, reasoning or tool
            // call in it is the role chunk.
            (Starts::Opening(""), _) => {
                !self.openings.is_empty()
                    && decoded.iter().all(|d| matches!(d, Decoded::Event { class: EventClass::Lifecycle, .. }))
            }
            (Starts::Opening(opening), response) => {
                maps(response, self.response.as_ref());
                self.openings.contains(&opening)
            }
            (Starts::Block(index), _) => self.blocks.contains(&index),
            (Starts::Item(at, id), _) => {
                let had = self.items.iter().find(|(i, _)| *i == at);
                maps(Some(id), had.map(|(_, id)| id));
                had.is_some()
            }
            (Starts::Part(summary, at, part), _) => self.parts.contains(&(summary, at, part)),
            (Starts::Nothing, _) => false,
        }
    }
}

/// What becomes of one event of a followed attempt.
#[derive(Debug, PartialEq)]
pub(super) enum Follows {
    /// The agent has it: not sent.
    Dropped,
    /// Sent as it came.
    AsIs,
    /// Sent with this data instead (ids mapped, renumbered).
    As(String),
}

/// A retried attempt after the agent had events of an earlier one.
pub(super) struct Follow {
    dialect: Dialect,
    /// Tells the attempt's first output (which ends the dropping) from
    /// the rest.
    sorter: Box<dyn Decoder>,
    decoded: Vec<Decoded>,
    /// Before the attempt's first output.
    before_output: bool,
    /// Responses: the attempt's ids, each with the agent's.
    ids: Vec<(String, String)>,
    /// Responses: the `sequence_number` the agent's next event must
    /// reach at least.
    next: u64,
    /// Responses: what is added to the attempt's `sequence_number`.
    shift: u64,
}

impl Follow {
    /// An attempt of `dialect` after the agent's events, the next
    /// `sequence_number` being `next` (Responses).
    pub(super) fn new(dialect: Dialect, next: u64) -> Follow {
        Follow {
            dialect,
            sorter: Box::new(dialect.decoder()),
            decoded: Vec::new(),
            before_output: true,
            ids: Vec::new(),
            next,
            shift: 0,
        }
    }

    /// Whether nothing is left to do: the first output went, and no id
    /// or number needs changing.
    pub(super) fn over(&self) -> bool {
        !self.before_output && self.ids.is_empty() && self.shift == 0
    }

    /// What becomes of the event `name`, `data` (`framed`: its bytes), the
    /// agent having `had`.
    pub(super) fn follow(&mut self, (name, data): (&str, &str), framed: &[u8], had: &Had) -> Follows {
        if self.before_output {
            self.decoded.clear();
            self.sorter.feed(framed, &mut self.decoded);
            let commits = self.decoded.iter().any(
                |d| matches!(d, Decoded::Event { class, .. } if class.is_output() || *class == EventClass::Reasoning),
            );
            if commits {
                self.before_output = false;
            } else if had.has(self.dialect, (name, data), &self.decoded, &mut self.ids) {
                return Follows::Dropped;
            }
        }
        if self.dialect != Dialect::OpenAiResponses {
            return Follows::AsIs;
        }
        self.renamed(data).map_or(Follows::AsIs, Follows::As)
    }

    /// A Responses event's data with the agent's ids and a number past
    /// its last, when either changes it.
    fn renamed(&mut self, data: &str) -> Option<String> {
        let sequence = serde_json::from_str::<Start<'_>>(data).ok()?.sequence_number;
        let renumbered = sequence.map(|at| {
            if at + self.shift < self.next {
                self.shift = self.next - at;
            }
            self.next = at + self.shift + 1;
            at + self.shift
        });
        if self.ids.is_empty() && self.shift == 0 {
            return None;
        }
        let mut value: Value = serde_json::from_str(data).ok()?;
        rename(&mut value, &self.ids);
        if let (Some(at), Some(object)) = (renumbered, value.as_object_mut()) {
            object.insert("sequence_number".to_owned(), at.into());
        }
        Some(value.to_string())
    }
}

/// Every `id` and `item_id` in `value` that is one of `ids`' first,
/// replaced by its second.
fn rename(value: &mut Value, ids: &[(String, String)]) {
    match value {
        Value::Object(object) => {
            for (key, field) in object.iter_mut() {
                if let (Value::String(id), "id" | "item_id") = (&mut *field, key.as_str())
                    && let Some((_, ours)) = ids.iter().find(|(theirs, _)| theirs == id)
                {
                    ours.clone_into(id);
                } else {
                    rename(field, ids);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| rename(item, ids)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One event: its name and data.
    type Event = (String, String);

    /// `event` framed as SSE.
    fn framed((name, data): &Event) -> String {
        let named = if name.is_empty() { String::new() } else { format!("event: {name}\n") };
        format!("{named}data: {data}\n\n")
    }

    /// `events` of one attempt of `dialect` after the agent had `had`
    /// (its next `sequence_number` being `next`): the data of each the
    /// agent gets, noted as it goes.
    fn followed(dialect: Dialect, had: &mut Had, next: u64, events: &[Event]) -> Vec<String> {
        let mut follow = Follow::new(dialect, next);
        let mut sent = Vec::new();
        for event in events {
            let data = match follow.follow((&event.0, &event.1), framed(event).as_bytes(), had) {
                Follows::Dropped => continue,
                Follows::AsIs => event.1.clone(),
                Follows::As(data) => data,
            };
            had.note(dialect, &event.0, &data);
            sent.push(data);
        }
        sent
    }

    /// A Responses event of `kind` with `fields` and `sequence`.
    fn responses(kind: &str, fields: &str, sequence: u64) -> Event {
        (kind.to_owned(), format!(r#"{{"type":"{kind}",{fields}"sequence_number":{sequence}}}"#))
    }

    /// The first `through` events of a Responses attempt whose response is
    /// `response` and item `item`: its opening, one text delta, its end.
    fn attempt(response: &str, item: &str, through: usize) -> Vec<Event> {
        let head = format!(r#""response":{{"id":"{response}","status":"in_progress","output":[]}},"#);
        let at = format!(r#""item_id":"{item}","output_index":0,"content_index":0,"#);
        let done = format!(r#""response":{{"id":"{response}","status":"completed","output":[{{"id":"{item}"}}]}},"#);
        let events = [
            responses("response.created", &head, 0),
            responses("response.in_progress", &head, 1),
            responses("response.output_item.added", &format!(r#""output_index":0,"item":{{"id":"{item}"}},"#), 2),
            responses("response.content_part.added", &format!(r#"{at}"part":{{"type":"output_text"}},"#), 3),
            responses("response.output_text.delta", &format!(r#"{at}"delta":"Hi","#), 4),
            responses("response.completed", &done, 5),
        ];
        events.into_iter().take(through).collect()
    }

    /// The value at `pointer` in each event's data, where it has one.
    fn each(sent: &[String], pointer: &str) -> Vec<Value> {
        sent.iter().filter_map(|d| serde_json::from_str::<Value>(d).unwrap().pointer(pointer).cloned()).collect()
    }

    /// Wherever the first attempt stalled in its opening, the agent reads
    /// one opening: each start event once, one response id and one item
    /// id throughout (the first it got), numbers that only go up.
    #[test]
    fn a_responses_retry_after_any_part_of_the_opening_sends_each_start_once_under_the_agent_s_ids() {
        for stalled_after in 1..=4 {
            let mut had = Had::default();
            let first = attempt("resp_1", "msg_1", stalled_after);
            for (name, data) in &first {
                had.note(Dialect::OpenAiResponses, name, data);
            }
            let sent =
                followed(Dialect::OpenAiResponses, &mut had, stalled_after as u64, &attempt("resp_2", "msg_2", 6));
            let all: Vec<String> = first.into_iter().map(|(_, data)| data).chain(sent).collect();
            let kinds = each(&all, "/type");
            assert_eq!(kinds, attempt("r", "m", 6).iter().map(|(kind, _)| kind.as_str()).collect::<Vec<_>>());
            let numbers: Vec<u64> = each(&all, "/sequence_number").iter().filter_map(Value::as_u64).collect();
            assert!(numbers.windows(2).all(|w| w[0] < w[1]), "stalled after {stalled_after}: {numbers:?}");
            let item = if stalled_after >= 3 { "msg_1" } else { "msg_2" };
            let items = [each(&all, "/item/id"), each(&all, "/item_id"), each(&all, "/response/output/0/id")].concat();
            assert_eq!(items.len(), 4, "stalled after {stalled_after}: {all:?}");
            assert!(items.iter().all(|id| id == item), "stalled after {stalled_after}: {items:?}");
            let responses = each(&all, "/response/id");
            assert!(responses.iter().all(|id| id == "resp_1"), "stalled after {stalled_after}: {responses:?}");
        }
    }

    /// A retry that names what the agent has as the agent has it, numbered
    /// past its last, needs no change: its starts are dropped, the rest
    /// goes as it came, and from its first output it is not looked at.
    #[test]
    fn a_responses_retry_with_the_same_ids_and_numbers_is_sent_as_it_came() {
        let mut had = Had::default();
        for (name, data) in attempt("resp_1", "msg_1", 4) {
            had.note(Dialect::OpenAiResponses, &name, &data);
        }
        let mut follow = Follow::new(Dialect::OpenAiResponses, 4);
        let fates: Vec<Follows> = attempt("resp_1", "msg_1", 6)
            .iter()
            .map(|event| follow.follow((&event.0, &event.1), framed(event).as_bytes(), &had))
            .collect();
        use Follows::*;
        assert_eq!(fates, [Dropped, Dropped, Dropped, Dropped, AsIs, AsIs]);
        assert!(follow.over());
    }

    #[test]
    fn a_retry_numbered_behind_the_agent_is_moved_past_its_last() {
        let mut had = Had::default();
        for (name, data) in attempt("resp_1", "msg_1", 2) {
            had.note(Dialect::OpenAiResponses, &name, &data);
        }
        // The agent also had a bookkeeping event, numbered 2.
        let sent = followed(Dialect::OpenAiResponses, &mut had, 3, &attempt("resp_1", "msg_1", 6));
        let numbers: Vec<u64> = each(&sent, "/sequence_number").iter().filter_map(Value::as_u64).collect();
        assert_eq!(numbers, [3, 4, 5, 6]);
    }

    /// Anthropic: `message_start` once, each block index once; a new
    /// index goes on, before the first output or after it.
    #[test]
    fn an_anthropic_retry_sends_a_block_start_only_for_an_index_the_agent_lacks() {
        let event = |name: &str, data: &str| (name.to_owned(), data.to_owned());
        let start = |index: u64| {
            let data = format!(r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"text"}}}}"#);
            event("content_block_start", &data)
        };
        let message = event("message_start", r#"{"type":"message_start","message":{"id":"msg_1"}}"#);
        let delta = event(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        );
        let ping = event("ping", r#"{"type":"ping"}"#);
        let mut had = Had::default();
        for (name, data) in [&message, &start(0)] {
            had.note(Dialect::AnthropicMessages, name, data);
        }
        let retry = [
            event("message_start", &message.1.replace("msg_1", "msg_2")),
            start(0),
            ping.clone(),
            delta.clone(),
            start(1),
        ];
        let sent = followed(Dialect::AnthropicMessages, &mut had, 0, &retry);
        assert_eq!(sent, [ping.1, delta.1, start(1).1]);
        let mut had = Had::default();
        had.note(Dialect::AnthropicMessages, &message.0, &message.1);
        assert_eq!(followed(Dialect::AnthropicMessages, &mut had, 0, &retry[..2]), [start(0).1]);
    }

    /// Chat: the role chunk goes once, and to an agent that had none.
    #[test]
    fn a_chat_retry_drops_its_role_chunk_only_when_the_agent_has_one() {
        let role =
            r#"{"id":"c-2","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
        let text = r#"{"id":"c-2","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
        let retry = [(String::new(), role.to_owned()), (String::new(), text.to_owned())];
        let mut had = Had::default();
        assert_eq!(followed(Dialect::OpenAiChat, &mut had, 0, &retry), [role, text]);
        assert_eq!(followed(Dialect::OpenAiChat, &mut had, 0, &retry), [text]);
    }
}
