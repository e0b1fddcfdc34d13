//! The copy of a response's body that the recording reads, decoded as its
//! `content-encoding` says. Observing, the agent gets the bytes as they
//! came (compressed, when they were); the core gets the text they stand
//! for. The guard, which relays what the core reads, hands the agent the
//! decoded text too.
//! gzip (`x-gzip`), deflate and br are decoded as each chunk is read, one copy
//! chunk per chunk (empty while the decoder waits for more: the chunk still
//! came), so the recording keeps the upstream's timing.
//!
//! A body observe cannot decode (another encoding, several, corrupt
//! bytes) never reaches a parser as if it were text: the copy says why in
//! its place. An event stream's copy ends there as a malformed stream; any
//! other body's copy carries the reason instead of the rest of its text, so
//! an error keeps its status and a non-stream answer its outcome.

use std::io::Write;

use brotli::DecompressorWriter;
use bytes::Bytes;
use flate2::write::{GzDecoder, ZlibDecoder};
use http::HeaderMap;

use crate::core::failure::Failure;
use crate::core::upstream::{Chunk, content_type, is_event_stream};

/// What observe decodes, for messages about what it does not.
const DECODED: &str = "observe records only gzip, deflate and br";

/// The brotli decoder's output buffer: an event or two.
const BROTLI_BUFFER: usize = 4096;

/// How one response's body is copied for the core.
pub(super) struct CopyDecoder {
    copying: Copying,
    /// The encodings as the response named them, for messages.
    encoding: String,
    /// The copy is read as events: a 2xx event stream, as the governor
    /// decides it (anything else is kept as text).
    events: bool,
}

/// Where a copy is.
enum Copying {
    /// No encoding: the bytes as they came.
    AsIs,
    /// Decoding gzip (boxed: a decoder's state is large).
    Gzip(Box<GzDecoder<Vec<u8>>>),
    /// Decoding deflate (zlib-wrapped, as HTTP's `deflate` is).
    Deflate(Box<ZlibDecoder<Vec<u8>>>),
    /// Decoding brotli.
    Brotli(Box<DecompressorWriter<Vec<u8>>>),
    /// An encoding observe does not decode, and why; said at the first
    /// chunk.
    Unsupported(String),
    /// Why the copy cannot go on has been said.
    Said,
}

impl CopyDecoder {
    /// For a response with `status` and `headers`.
    pub fn of(status: u16, headers: &HeaderMap) -> CopyDecoder {
        let named: Vec<String> = headers
            .get_all(http::header::CONTENT_ENCODING)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        let listed: Vec<String> = named
            .join(",")
            .split(',')
            .map(|coding| coding.trim().to_ascii_lowercase())
            .filter(|coding| !coding.is_empty() && coding != "identity")
            .collect();
        let encoding = listed.join(", ");
        let copying = match listed.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            [] => Copying::AsIs,
            ["gzip" | "x-gzip"] => Copying::Gzip(Box::new(GzDecoder::new(Vec::new()))),
            ["deflate"] => Copying::Deflate(Box::new(ZlibDecoder::new(Vec::new()))),
            ["br"] => Copying::Brotli(Box::new(DecompressorWriter::new(Vec::new(), BROTLI_BUFFER))),
            [_] => Copying::Unsupported(format!("content-encoding {encoding}: {DECODED}")),
            _ => Copying::Unsupported(format!("content-encoding {encoding}: {DECODED}, one at a time")),
        };
        let events = is_event_stream(status, content_type(headers));
        CopyDecoder { copying, encoding, events }
    }

    /// Whether the copy is decoded: false for a body of no encoding, whose
    /// copy is the bytes as they came.
    pub fn decodes(&self) -> bool {
        !matches!(self.copying, Copying::AsIs)
    }

    /// The copy of one chunk read: its decoded bytes (possibly none yet),
    /// then, the first time the body cannot be decoded, the failure that
    /// ends an event stream's copy.
    pub fn decode(&mut self, wire: &Bytes) -> impl Iterator<Item = Result<Chunk, Failure>> + use<> {
        let (bytes, failure) = self.next(wire);
        bytes
            .map(|bytes| Ok(Chunk::from(bytes)))
            .into_iter()
            .chain(failure.map(|message| Err(Failure::Malformed { message })))
    }

    /// The decoded bytes of `wire` and, when it is the first that cannot
    /// be decoded in an event stream, why.
    fn next(&mut self, wire: &Bytes) -> (Option<Bytes>, Option<String>) {
        let decoded = match &mut self.copying {
            Copying::AsIs => return (Some(wire.clone()), None),
            Copying::Gzip(decoder) => inflate(&mut **decoder, wire, GzDecoder::get_mut, &self.encoding),
            Copying::Deflate(decoder) => inflate(&mut **decoder, wire, ZlibDecoder::get_mut, &self.encoding),
            Copying::Brotli(decoder) => inflate(&mut **decoder, wire, DecompressorWriter::get_mut, &self.encoding),
            Copying::Unsupported(why) => Err(std::mem::take(why)),
            // An event stream's copy has ended; another body's goes on
            // empty, at the upstream's pace.
            Copying::Said => return ((!self.events).then(Bytes::new), None),
        };
        let why = match decoded {
            Ok(text) => return (Some(text), None),
            Err(why) => why,
        };
        self.copying = Copying::Said;
        // An event stream's chunk still came, and is recorded when it did,
        // empty, before the failure; another body's carries the reason.
        if self.events { (Some(Bytes::new()), Some(why)) } else { (Some(Bytes::from(why)), None) }
    }
}

/// Feeds `wire` to `decoder` (of `encoding`) and takes what it has
/// decoded so far; bytes it refuses say why.
fn inflate<D: Write>(
    decoder: &mut D,
    wire: &[u8],
    output: fn(&mut D) -> &mut Vec<u8>,
    encoding: &str,
) -> Result<Bytes, String> {
    match decoder.write_all(wire).and_then(|()| decoder.flush()) {
        Ok(()) => Ok(Bytes::from(std::mem::take(output(decoder)))),
        // The decoder takes nothing after the end of its stream.
        Err(error) if error.kind() == std::io::ErrorKind::WriteZero => {
            Err(format!("content-encoding {encoding}: bytes after the end of the compressed body"))
        }
        Err(error) => Err(format!("content-encoding {encoding}: the body could not be decoded ({error})")),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use flate2::Compression;
    use flate2::read::{GzEncoder, ZlibEncoder};

    use super::*;

    /// An event stream's text.
    const TEXT: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n\
                        data: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\n\ndata: [DONE]\n\n";

    /// A response's headers: an event stream, or JSON, under `encoding`.
    fn headers(stream: bool, encoding: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let content_type = if stream { "text/event-stream" } else { "application/json" };
        headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
        for coding in encoding {
            headers.append(http::header::CONTENT_ENCODING, http::HeaderValue::from_str(coding).unwrap());
        }
        headers
    }

    /// `TEXT` compressed whole, as `encoding`.
    fn compressed(encoding: &str) -> Vec<u8> {
        let mut encoder: Box<dyn Read> = match encoding {
            "gzip" => Box::new(GzEncoder::new(TEXT.as_bytes(), Compression::fast())),
            "br" => Box::new(brotli::CompressorReader::new(TEXT.as_bytes(), 4096, 5, 22)),
            _ => Box::new(ZlibEncoder::new(TEXT.as_bytes(), Compression::fast())),
        };
        let mut out = Vec::new();
        encoder.read_to_end(&mut out).unwrap();
        out
    }

    /// Every copy of `chunks` read in turn, one list per chunk.
    fn copies(mut decoder: CopyDecoder, chunks: &[&[u8]]) -> Vec<Vec<Result<Chunk, Failure>>> {
        chunks.iter().map(|chunk| decoder.decode(&Bytes::copy_from_slice(chunk)).collect()).collect()
    }

    /// The text of copies that are all chunks.
    fn text(copies: Vec<Vec<Result<Chunk, Failure>>>) -> String {
        let bytes: Vec<u8> = copies.into_iter().flatten().flat_map(|copy| copy.unwrap().bytes).collect();
        String::from_utf8(bytes).unwrap()
    }

    /// The failure among copies, when there is one.
    fn failure(copies: &[Vec<Result<Chunk, Failure>>]) -> Option<String> {
        copies.iter().flatten().find_map(|copy| copy.as_ref().err().map(ToString::to_string))
    }

    #[test]
    fn gzip_deflate_and_brotli_split_at_every_byte_boundary_decode_to_the_same_text() {
        for encoding in ["gzip", "x-gzip", "deflate", "br"] {
            let wire = compressed(if encoding == "x-gzip" { "gzip" } else { encoding });
            for cut in 0..=wire.len() {
                let got = copies(CopyDecoder::of(200, &headers(true, &[encoding])), &[&wire[..cut], &wire[cut..]]);
                assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1], "{encoding} cut at {cut}");
                assert_eq!(text(got), TEXT, "{encoding} cut at {cut}");
            }
            let bytes: Vec<&[u8]> = wire.chunks(1).collect();
            let got = copies(CopyDecoder::of(200, &headers(true, &[encoding])), &bytes);
            assert_eq!(got.iter().filter(|c| c.len() == 1).count(), wire.len(), "one copy a chunk: {encoding}");
            assert_eq!(text(got), TEXT, "{encoding} a byte at a time");
        }
    }

    #[test]
    fn an_event_flushed_upstream_is_decoded_with_its_own_chunk() {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), Compression::fast());
        let mut decoder = CopyDecoder::of(200, &headers(true, &["gzip"]));
        for event in TEXT.split_inclusive("\n\n") {
            encoder.write_all(event.as_bytes()).unwrap();
            encoder.flush().unwrap();
            let wire = Bytes::from(std::mem::take(encoder.get_mut()));
            assert_eq!(text(vec![decoder.decode(&wire).collect()]), event, "nothing waits for the next chunk");
        }
        let trailer = Bytes::from(encoder.finish().unwrap());
        assert_eq!(text(vec![decoder.decode(&trailer).collect()]), "");
    }

    #[test]
    fn a_body_of_no_encoding_is_copied_as_it_came() {
        for encoding in [&[][..], &["identity"]] {
            let got = copies(CopyDecoder::of(200, &headers(true, encoding)), &[b"data: a\n", b"\n"]);
            assert_eq!(text(got), "data: a\n\n");
        }
    }

    #[test]
    fn an_encoding_observe_does_not_decode_ends_an_event_stream_s_copy_naming_it() {
        for (encoding, said) in [
            (&["zstd"][..], "content-encoding zstd: observe records only gzip, deflate and br"),
            (&["ZSTD"], "content-encoding zstd: observe records only gzip, deflate and br"),
            (&["gzip, br"], "content-encoding gzip, br: observe records only gzip, deflate and br, one at a time"),
            (
                &["gzip", "gzip"],
                "content-encoding gzip, gzip: observe records only gzip, deflate and br, one at a time",
            ),
        ] {
            let got = copies(CopyDecoder::of(200, &headers(true, encoding)), &[b"\x1b\x2c", b"\x00"]);
            assert_eq!(got[0].len(), 2, "an empty chunk where the bytes came, then why: {got:?}");
            assert_eq!(got[0][0].as_ref().map(|c| c.bytes.len()).ok(), Some(0));
            assert_eq!(failure(&got), Some(format!("malformed stream: {said}")));
            assert!(got[1].is_empty(), "the copy has ended: {got:?}");
        }
    }

    #[test]
    fn another_body_observe_cannot_decode_says_why_in_its_place() {
        // An error keeps its status, an answer that does not stream its
        // outcome: the reason stands in for the text, the chunks go on.
        for (status, stream) in [(429, false), (200, false), (500, true)] {
            let got = copies(CopyDecoder::of(status, &headers(stream, &["zstd"])), &[b"\x28\xb5", b"\x2f\xfd"]);
            assert_eq!(failure(&got), None);
            assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1]);
            assert_eq!(text(got), "content-encoding zstd: observe records only gzip, deflate and br");
        }
    }

    #[test]
    fn corrupt_compressed_bytes_end_the_copy_with_one_message() {
        let wire = compressed("gzip");
        // A gzip header, then a block of the reserved type.
        let corrupt = [&wire[..10], &[0xff, 0xff, 0xff][..]].concat();
        let got = copies(CopyDecoder::of(200, &headers(true, &["gzip"])), &[&corrupt, &wire]);
        let said = failure(&got).unwrap();
        assert!(said.starts_with("malformed stream: content-encoding gzip: the body could not be decoded ("), "{said}");
        assert!(got[1].is_empty(), "{got:?}");

        let got = copies(CopyDecoder::of(200, &headers(true, &["deflate"])), &[b"not zlib at all"]);
        assert!(failure(&got).unwrap().contains("content-encoding deflate: the body could not be decoded"), "{got:?}");

        let trailing = [wire.as_slice(), b"more"].concat();
        let got = copies(CopyDecoder::of(200, &headers(true, &["gzip"])), &[&trailing]);
        let said = failure(&got).unwrap();
        assert_eq!(said, "malformed stream: content-encoding gzip: bytes after the end of the compressed body");

        let got = copies(CopyDecoder::of(502, &headers(false, &["gzip"])), &[&corrupt, &wire]);
        assert_eq!(failure(&got), None, "an error body keeps its status");
        assert!(text(got).starts_with("content-encoding gzip: the body could not be decoded ("));
    }
}
