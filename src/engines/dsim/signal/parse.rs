//! The signal language's parser: tokens, a recursive-descent parser with variables and
//! `nodither(...)` statements, and the mapping of a program's outputs onto streams.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Signal, StreamSignal};

/// Why a signal program does not parse (`--signals`, `?signals`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SignalError {
    /// A number token that does not parse.
    #[error("bad number {text:?} at column {column}")]
    BadNumber {
        /// The token.
        text: String,
        /// Its column (from 1).
        column: usize,
    },
    /// A character the language does not have.
    #[error("unexpected character {c:?} at column {column}")]
    UnexpectedCharacter {
        /// The character.
        c: char,
        /// Its column (from 1).
        column: usize,
    },
    /// Something else where a token was expected.
    #[error("expected {what} at {at}")]
    Expected {
        /// What was expected (`')'`, `a signal`).
        what: String,
        /// Where (`column 7`, `end of input`).
        at: String,
    },
    /// A statement without its `;`.
    #[error("{0} (every statement ends with ';')")]
    Unterminated(Box<SignalError>),
    /// A function given too few or too many arguments.
    #[error("{name} takes {min}..={max} arguments, got {got}")]
    ArgumentCount {
        /// The function.
        name: &'static str,
        /// Fewest arguments.
        min: usize,
        /// Most arguments.
        max: usize,
        /// Arguments given.
        got: usize,
    },
    /// A function argument that is not finite.
    #[error("{0}: arguments must be finite")]
    NotFinite(&'static str),
    /// An argument or construct the function does not take.
    #[error("{0}")]
    Invalid(&'static str),
    /// A `nodither(...)` variable inside an expression.
    #[error("variable {0} is nodither(...) and cannot be combined")]
    NoDitherCombined(String),
    /// A name that is neither a function nor a variable.
    #[error("unknown function or variable {0:?}")]
    Unknown(String),
    /// A variable assigned twice.
    #[error("variable {0} is defined twice")]
    DefinedTwice(String),
    /// An assignment to a function's name.
    #[error("{0} is a function name")]
    FunctionName(String),
    /// A program without an output statement.
    #[error("no output signal: write one ';'-terminated expression per stream")]
    NoOutput,
    /// Neither one output nor one per stream.
    #[error(
        "{expressions} signal expressions for {streams} streams (give one, or one per stream)"
    )]
    StreamCount {
        /// Output statements.
        expressions: usize,
        /// Streams.
        streams: usize,
    },
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Name(String),
    Sym(char),
}

fn tokenize(s: &str) -> Result<Vec<(usize, Tok)>, SignalError> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i] as char;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit()
            || (c == '.' && i + 1 < b.len() && (b[i + 1] as char).is_ascii_digit())
        {
            let start = i;
            while i < b.len() && ((b[i] as char).is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
                let save = i;
                i += 1;
                if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
                    i += 1;
                }
                if i < b.len() && (b[i] as char).is_ascii_digit() {
                    while i < b.len() && (b[i] as char).is_ascii_digit() {
                        i += 1;
                    }
                } else {
                    i = save;
                }
            }
            let text = &s[start..i];
            let v: f64 = text.parse().map_err(|_| SignalError::BadNumber {
                text: text.to_string(),
                column: start + 1,
            })?;
            out.push((start, Tok::Num(v)));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < b.len() && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((start, Tok::Name(s[start..i].to_string())));
        } else if "+-*(),;=".contains(c) {
            out.push((i, Tok::Sym(c)));
            i += 1;
        } else {
            return Err(SignalError::UnexpectedCharacter { c, column: i + 1 });
        }
    }
    Ok(out)
}

#[derive(Clone)]
enum Value {
    Sig(Arc<Signal>),
    NoDither(Arc<Signal>),
}

struct Parser<'a> {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    vars: HashMap<String, Value>,
    entropy: &'a mut dyn FnMut() -> u64,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.1)
    }

    fn where_(&self) -> String {
        match self.toks.get(self.pos) {
            Some((c, _)) => format!("column {}", c + 1),
            None => "end of input".into(),
        }
    }

    fn expected(&self, what: impl Into<String>) -> SignalError {
        SignalError::Expected {
            what: what.into(),
            at: self.where_(),
        }
    }

    fn expect(&mut self, c: char) -> Result<(), SignalError> {
        match self.peek() {
            Some(Tok::Sym(x)) if *x == c => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.expected(format!("'{c}'"))),
        }
    }

    fn number(&mut self) -> Result<f64, SignalError> {
        let neg = if self.peek() == Some(&Tok::Sym('-')) {
            self.pos += 1;
            true
        } else {
            false
        };
        match self.peek().cloned() {
            Some(Tok::Num(v)) => {
                self.pos += 1;
                Ok(if neg { -v } else { v })
            }
            _ => Err(self.expected("a literal number")),
        }
    }

    fn top(&mut self) -> Result<Value, SignalError> {
        // A nodither variable may stand alone as a statement.
        if let (Some(Tok::Name(n)), Some(Tok::Sym(';'))) =
            (self.peek(), self.toks.get(self.pos + 1).map(|t| &t.1))
        {
            if let Some(v @ Value::NoDither(_)) = self.vars.get(n) {
                let v = v.clone();
                self.pos += 1;
                return Ok(v);
            }
        }
        if let Some(Tok::Name(n)) = self.peek() {
            if n == "nodither" {
                self.pos += 1;
                self.expect('(')?;
                let e = self.expr()?;
                self.expect(')')?;
                return Ok(Value::NoDither(e));
            }
        }
        Ok(Value::Sig(self.expr()?))
    }

    fn expr(&mut self) -> Result<Arc<Signal>, SignalError> {
        let mut lhs = self.term()?;
        loop {
            match self.peek() {
                Some(Tok::Sym('+')) => {
                    self.pos += 1;
                    lhs = Arc::new(Signal::Add(lhs, self.term()?));
                }
                Some(Tok::Sym('-')) => {
                    self.pos += 1;
                    lhs = Arc::new(Signal::Sub(lhs, self.term()?));
                }
                _ => return Ok(lhs),
            }
        }
    }

    fn term(&mut self) -> Result<Arc<Signal>, SignalError> {
        let mut lhs = self.unary()?;
        while self.peek() == Some(&Tok::Sym('*')) {
            self.pos += 1;
            lhs = Arc::new(Signal::Mul(lhs, self.unary()?));
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Arc<Signal>, SignalError> {
        if self.peek() == Some(&Tok::Sym('-')) {
            self.pos += 1;
            let inner = self.unary()?;
            return Ok(Arc::new(Signal::Sub(Arc::new(Signal::Const(0.0)), inner)));
        }
        self.atom()
    }

    fn args(
        &mut self,
        name: &'static str,
        min: usize,
        max: usize,
    ) -> Result<Vec<f64>, SignalError> {
        self.expect('(')?;
        let mut v = vec![self.number()?];
        while self.peek() == Some(&Tok::Sym(',')) {
            self.pos += 1;
            v.push(self.number()?);
        }
        self.expect(')')?;
        if v.len() < min || v.len() > max {
            return Err(SignalError::ArgumentCount {
                name,
                min,
                max,
                got: v.len(),
            });
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err(SignalError::NotFinite(name));
        }
        Ok(v)
    }

    fn atom(&mut self) -> Result<Arc<Signal>, SignalError> {
        let tok = self.peek().cloned();
        match tok {
            Some(Tok::Num(v)) => {
                self.pos += 1;
                Ok(Arc::new(Signal::Const(v)))
            }
            Some(Tok::Sym('(')) => {
                self.pos += 1;
                let e = self.expr()?;
                self.expect(')')?;
                Ok(e)
            }
            Some(Tok::Name(n)) => {
                self.pos += 1;
                match n.as_str() {
                    "cw" => {
                        let a = self.args("cw", 2, 2)?;
                        Ok(Arc::new(Signal::Cw {
                            amp: a[0],
                            freq: a[1],
                        }))
                    }
                    "comb" => {
                        let a = self.args("comb", 2, 2)?;
                        Ok(Arc::new(Signal::Comb {
                            amp: a[0],
                            freq: a[1],
                        }))
                    }
                    "multicw" => {
                        let a = self.args("multicw", 5, 5)?;
                        if a[0] < 0.0 || a[0].fract() != 0.0 || a[0] > 1e6 {
                            return Err(SignalError::Invalid(
                                "multicw: m must be a non-negative integer",
                            ));
                        }
                        Ok(Arc::new(Signal::MultiCw {
                            m: a[0] as u32,
                            amp0: a[1],
                            amp_step: a[2],
                            freq0: a[3],
                            freq_step: a[4],
                        }))
                    }
                    "wgn" => {
                        let a = self.args("wgn", 1, 2)?;
                        if a[0] < 0.0 {
                            return Err(SignalError::Invalid("wgn: std must be non-negative"));
                        }
                        let entropy = match a.get(1) {
                            Some(&e) if e >= 0.0 && e.fract() == 0.0 && e < 1.8e19 => e as u64,
                            Some(_) => {
                                return Err(SignalError::Invalid(
                                    "wgn: entropy must be a non-negative integer",
                                ))
                            }
                            None => (self.entropy)(),
                        };
                        Ok(Arc::new(Signal::Wgn { std: a[0], entropy }))
                    }
                    "delay" => {
                        self.expect('(')?;
                        let e = self.expr()?;
                        self.expect(',')?;
                        let d = self.number()?;
                        self.expect(')')?;
                        if d.fract() != 0.0 || d.abs() > 1e15 {
                            return Err(SignalError::Invalid(
                                "delay: only integer sample delays are supported",
                            ));
                        }
                        Ok(Arc::new(Signal::Delay(e, d as i64)))
                    }
                    "nodither" => Err(SignalError::Invalid(
                        "nodither(...) must be the whole statement",
                    )),
                    name => match self.vars.get(name) {
                        Some(Value::Sig(s)) => Ok(s.clone()),
                        Some(Value::NoDither(_)) => {
                            Err(SignalError::NoDitherCombined(name.to_string()))
                        }
                        None => Err(SignalError::Unknown(name.to_string())),
                    },
                }
            }
            _ => Err(self.expected("a signal")),
        }
    }
}

/// Parses a program; `entropy` supplies seeds for `wgn` without an explicit one.
pub fn parse(
    src: &str,
    entropy: &mut dyn FnMut() -> u64,
) -> Result<Vec<StreamSignal>, SignalError> {
    let toks = tokenize(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        vars: HashMap::new(),
        entropy,
    };
    let mut outs = Vec::new();
    while p.pos < p.toks.len() {
        let assign = match (
            p.toks.get(p.pos).map(|t| &t.1),
            p.toks.get(p.pos + 1).map(|t| &t.1),
        ) {
            (Some(Tok::Name(n)), Some(Tok::Sym('='))) => Some(n.clone()),
            _ => None,
        };
        if let Some(name) = assign {
            if p.vars.contains_key(&name) {
                return Err(SignalError::DefinedTwice(name));
            }
            if ["cw", "comb", "multicw", "wgn", "delay", "nodither"].contains(&name.as_str()) {
                return Err(SignalError::FunctionName(name));
            }
            p.pos += 2;
            let v = p.top()?;
            p.expect(';')?;
            p.vars.insert(name, v);
        } else {
            let v = p.top()?;
            p.expect(';')
                .map_err(|e| SignalError::Unterminated(Box::new(e)))?;
            outs.push(match v {
                Value::Sig(s) => StreamSignal {
                    signal: s,
                    dither: true,
                },
                Value::NoDither(s) => StreamSignal {
                    signal: s,
                    dither: false,
                },
            });
        }
    }
    if outs.is_empty() {
        return Err(SignalError::NoOutput);
    }
    Ok(outs)
}

/// Maps the program's outputs onto `n_streams` streams: one each, or one for all.
pub fn per_stream(
    outs: Vec<StreamSignal>,
    n_streams: usize,
) -> Result<Vec<StreamSignal>, SignalError> {
    match outs.len() {
        1 => Ok(vec![outs[0].clone(); n_streams]),
        n if n == n_streams => Ok(outs),
        n => Err(SignalError::StreamCount {
            expressions: n,
            streams: n_streams,
        }),
    }
}
