//! katcp v5 message codec: `?request[id] args`, `!reply[id] args`, `#inform[id] args`,
//! space-separated arguments with katcp escapes (`\\ \_ \0 \n \r \e \t \@`). Parsing never
//! panics; malformed lines are errors.

/// A message's type, given by its first character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `?name`: a client asks the device to do something.
    Request,
    /// `!name`: the device's one answer to a request; its first argument is `ok`, `fail`
    /// or `invalid`.
    Reply,
    /// `#name`: an unsolicited or per-item message (e.g. one `#sensor-list` line per sensor
    /// before the `!sensor-list` reply).
    Inform,
}

impl Kind {
    fn sigil(self) -> u8 {
        match self {
            Kind::Request => b'?',
            Kind::Reply => b'!',
            Kind::Inform => b'#',
        }
    }
}

/// One katcp message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Request, reply or inform.
    pub kind: Kind,
    /// The message name (`sensor-list`): a letter, then letters, digits and hyphens.
    pub name: String,
    /// The message id in `?name[id]` (a positive integer), echoed in the reply and informs;
    /// `None` when the client sent none.
    pub mid: Option<u32>,
    /// The arguments, unescaped (raw bytes: katcp arguments need not be UTF-8).
    pub args: Vec<Vec<u8>>,
}

/// Why a line is not a katcp message; the text is sent back in a `#log error` inform.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

fn unescape(arg: &[u8]) -> Result<Vec<u8>, ParseError> {
    if arg == b"\\@" {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(arg.len());
    let mut it = arg.iter();
    while let Some(&c) = it.next() {
        if c != b'\\' {
            out.push(c);
            continue;
        }
        let e = it
            .next()
            .ok_or_else(|| ParseError("trailing backslash".into()))?;
        out.push(match e {
            b'\\' => b'\\',
            b'_' => b' ',
            b'0' => 0,
            b'n' => b'\n',
            b'r' => b'\r',
            b'e' => 0x1b,
            b't' => b'\t',
            b'@' => return Err(ParseError("\\@ inside an argument".into())),
            other => return Err(ParseError(format!("unknown escape \\{}", *other as char))),
        });
    }
    Ok(out)
}

fn escape(arg: &[u8], out: &mut Vec<u8>) {
    if arg.is_empty() {
        out.extend_from_slice(b"\\@");
        return;
    }
    for &c in arg {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b' ' => out.extend_from_slice(b"\\_"),
            0 => out.extend_from_slice(b"\\0"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0x1b => out.extend_from_slice(b"\\e"),
            b'\t' => out.extend_from_slice(b"\\t"),
            c => out.push(c),
        }
    }
}

impl Message {
    /// A message with raw (unescaped) byte arguments.
    pub fn new(kind: Kind, name: &str, mid: Option<u32>, args: Vec<Vec<u8>>) -> Self {
        Message {
            kind,
            name: name.to_string(),
            mid,
            args,
        }
    }

    /// A reply or inform with string arguments.
    pub fn with_args<S: AsRef<str>>(kind: Kind, name: &str, mid: Option<u32>, args: &[S]) -> Self {
        Message::new(
            kind,
            name,
            mid,
            args.iter()
                .map(|a| a.as_ref().as_bytes().to_vec())
                .collect(),
        )
    }

    /// Argument `i` as UTF-8 text.
    pub fn arg_str(&self, i: usize) -> Option<&str> {
        self.args.get(i).and_then(|a| std::str::from_utf8(a).ok())
    }

    /// Parses one line (without the newline).
    pub fn parse(line: &[u8]) -> Result<Message, ParseError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let mut parts = line
            .split(|&c| c == b' ' || c == b'\t')
            .filter(|p| !p.is_empty());
        let head = parts
            .next()
            .ok_or_else(|| ParseError("empty message".into()))?;
        let kind = match head[0] {
            b'?' => Kind::Request,
            b'!' => Kind::Reply,
            b'#' => Kind::Inform,
            _ => return Err(ParseError("message must start with ?, ! or #".into())),
        };
        let rest = &head[1..];
        let (name, mid) = match rest.iter().position(|&c| c == b'[') {
            Some(i) => {
                let close = rest
                    .len()
                    .checked_sub(1)
                    .filter(|&j| j > i && rest[j] == b']');
                let close = close.ok_or_else(|| ParseError("unterminated message id".into()))?;
                let id = std::str::from_utf8(&rest[i + 1..close])
                    .ok()
                    .and_then(|s| s.parse::<u32>().ok())
                    .filter(|&v| v > 0)
                    .ok_or_else(|| ParseError("message id must be a positive integer".into()))?;
                (&rest[..i], Some(id))
            }
            None => (rest, None),
        };
        let valid = !name.is_empty()
            && name[0].is_ascii_alphabetic()
            && name.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-');
        if !valid {
            return Err(ParseError("bad message name".into()));
        }
        let args = parts.map(unescape).collect::<Result<Vec<_>, _>>()?;
        Ok(Message {
            kind,
            name: String::from_utf8_lossy(name).into_owned(),
            mid,
            args,
        })
    }

    /// The message as a line, newline included.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.kind.sigil()];
        out.extend_from_slice(self.name.as_bytes());
        if let Some(m) = self.mid {
            out.extend_from_slice(format!("[{m}]").as_bytes());
        }
        for a in &self.args {
            out.push(b' ');
            escape(a, &mut out);
        }
        out.push(b'\n');
        out
    }
}

/// A line longer than the reader's limit: the rest of the connection cannot be trusted
/// to be in step, so the server reports it and disconnects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("line longer than {limit} bytes")]
pub struct LineTooLong {
    /// The limit that was exceeded.
    pub limit: usize,
}

/// Splits a byte stream into katcp lines, ended by `\n`, `\r` or `\r\n` (an `\r\n` gives
/// one line and an empty one, which the server skips as blank). Memory stays bounded: the
/// unfinished line is never longer than `limit` bytes, nor its buffer's capacity larger;
/// input that would make it longer is refused with [`LineTooLong`] before it is stored.
#[derive(Debug)]
pub struct LineReader {
    buf: Vec<u8>,
    limit: usize,
}

impl LineReader {
    /// A reader that accepts lines of at most `limit` bytes (terminator not counted).
    pub fn new(limit: usize) -> Self {
        LineReader {
            buf: Vec::new(),
            limit,
        }
    }

    /// Bytes of the unfinished line held.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Bytes the reader has allocated for the unfinished line (at most the limit).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Takes `data`, appending every line it completes to `lines` (without terminators).
    /// On [`LineTooLong`] the unfinished line is dropped (its memory freed); the lines
    /// completed before it are still in `lines`.
    pub fn feed(&mut self, data: &[u8], lines: &mut Vec<Vec<u8>>) -> Result<(), LineTooLong> {
        let mut rest = data;
        loop {
            let end = rest.iter().position(|&c| c == b'\n' || c == b'\r');
            let part = &rest[..end.unwrap_or(rest.len())];
            self.append(part)?;
            match end {
                Some(i) => {
                    lines.push(std::mem::take(&mut self.buf));
                    rest = &rest[i + 1..];
                }
                None => return Ok(()),
            }
        }
    }

    fn append(&mut self, part: &[u8]) -> Result<(), LineTooLong> {
        let need = self.buf.len() + part.len();
        if need > self.limit {
            self.buf = Vec::new();
            return Err(LineTooLong { limit: self.limit });
        }
        if need > self.buf.capacity() {
            // Double as a Vec would, but never past the limit.
            let want = (2 * self.buf.capacity()).max(need).max(256).min(self.limit);
            self.buf.reserve_exact(want - self.buf.len());
        }
        self.buf.extend_from_slice(part);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `\n`, `\r` and `\r\n` all end a line (katcp allows each); lines split across
    /// reads are joined.
    #[test]
    fn line_reader_takes_every_line_ending() {
        let mut r = LineReader::new(64);
        let mut lines = Vec::new();
        r.feed(b"?a\n?b\r?c\r\n?d", &mut lines).unwrap();
        assert_eq!(r.pending(), 2);
        r.feed(b"e\n", &mut lines).unwrap();
        let want: Vec<&[u8]> = vec![b"?a", b"?b", b"?c", b"", b"?de"];
        assert_eq!(lines, want);
        assert_eq!(r.pending(), 0);
    }

    /// A 96 MiB line without a terminator, fed 64 KiB at a time: refused as soon as it
    /// passes the limit, and the reader never holds (or allocates) more than the limit.
    #[test]
    fn line_reader_memory_stays_within_the_limit() {
        let limit = 1 << 20;
        let mut r = LineReader::new(limit);
        let mut lines = Vec::new();
        let block = vec![b'x'; 64 << 10];
        let mut fed = 0usize;
        let mut refused_at = None;
        while fed < 96 << 20 {
            let res = r.feed(&block, &mut lines);
            fed += block.len();
            assert!(r.pending() <= limit && r.capacity() <= limit, "{fed}");
            if res.is_err() && refused_at.is_none() {
                refused_at = Some(fed);
            }
        }
        assert_eq!(refused_at, Some(limit + block.len()));
        assert!(lines.is_empty());
        // A line of exactly the limit is taken.
        let mut r = LineReader::new(limit);
        r.feed(&vec![b'y'; limit], &mut lines).unwrap();
        r.feed(b"\n", &mut lines).unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].len(), limit);
    }

    #[test]
    fn round_trip_and_escapes() {
        let m = Message::new(
            Kind::Request,
            "gain",
            Some(7),
            vec![
                b"wide band".to_vec(),
                Vec::new(),
                b"a\\b\n\t\0\x1b\r".to_vec(),
            ],
        );
        let line = m.encode();
        assert_eq!(
            &line[..],
            &b"?gain[7] wide\\_band \\@ a\\\\b\\n\\t\\0\\e\\r\n"[..]
        );
        assert_eq!(Message::parse(&line[..line.len() - 1]).unwrap(), m);
        for bad in [
            &b""[..],
            b"gain",
            b"?",
            b"?gain[0]",
            b"?gain[x]",
            b"?ga in\\q",
            b"?gain[3",
            b"?9x",
            b"?a b\\",
        ] {
            assert!(
                Message::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_lines_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = Message::parse(&data);
        }

        #[test]
        fn any_args_round_trip(args in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20), 0..5)) {
            let args: Vec<Vec<u8>> = args.into_iter().map(|a| a.into_iter().filter(|&c| c != b'\n').collect()).collect();
            let m = Message::new(Kind::Inform, "x-y", None, args);
            let line = m.encode();
            proptest::prop_assert_eq!(Message::parse(&line[..line.len() - 1]).unwrap(), m);
        }
    }
}
