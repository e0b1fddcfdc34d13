//! The three streaming dialects the simulator speaks, and which endpoint
//! path selects each.

/// A provider wire format, chosen by the request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI chat completions, `POST /v1/chat/completions`.
    Chat,
    /// OpenAI Responses, `POST /v1/responses`.
    Responses,
    /// Anthropic Messages, `POST /v1/messages`.
    Messages,
}

impl Dialect {
    /// Every dialect, in the order of [`Dialect::PATHS`].
    pub const ALL: [Dialect; 3] = [Dialect::Chat, Dialect::Responses, Dialect::Messages];

    /// The endpoint paths, in the order of [`Dialect::ALL`].
    pub const PATHS: [&'static str; 3] = ["/v1/chat/completions", "/v1/responses", "/v1/messages"];

    /// The dialect served at `path`, if any.
    pub fn from_path(path: &str) -> Option<Dialect> {
        Dialect::ALL.into_iter().find(|d| d.path() == path)
    }

    /// The endpoint path of this dialect.
    pub fn path(self) -> &'static str {
        match self {
            Dialect::Chat => Dialect::PATHS[0],
            Dialect::Responses => Dialect::PATHS[1],
            Dialect::Messages => Dialect::PATHS[2],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip() {
        for dialect in Dialect::ALL {
            assert_eq!(Dialect::from_path(dialect.path()), Some(dialect));
        }
        assert_eq!(Dialect::from_path("/v1/completions"), None);
    }
}
