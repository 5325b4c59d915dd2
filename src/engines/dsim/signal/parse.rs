//! The signal language's parser: tokens, a recursive-descent parser with variables and
//! `nodither(...)` statements, and the mapping of a program's outputs onto streams.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Signal, StreamSignal};

/// Longest program accepted (bytes).
pub const MAX_SOURCE_BYTES: usize = 64 * 1024;
/// Deepest nesting of parentheses, unary minus and `delay(...)` (the parser recurses on it).
pub const MAX_NESTING: usize = 64;
/// Deepest operator tree of one expression (evaluation recurses on it).
pub const MAX_OPERATOR_DEPTH: u32 = 256;
/// Most operations per sample of one expression, counting a variable at every use and a
/// `multicw` as its `m` cosines: generation evaluates each one over the whole window.
pub const MAX_OPS_PER_SAMPLE: u64 = 4096;

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
    /// A program longer than [`MAX_SOURCE_BYTES`].
    #[error("signal program of {0} bytes is longer than {MAX_SOURCE_BYTES} bytes")]
    TooLong(usize),
    /// Parentheses, unary minus or `delay(...)` nested deeper than [`MAX_NESTING`].
    #[error("nesting deeper than {MAX_NESTING} at {0}")]
    TooNested(String),
    /// An operator tree deeper than [`MAX_OPERATOR_DEPTH`].
    #[error("expression deeper than {MAX_OPERATOR_DEPTH} operators at {0}")]
    TooDeep(String),
    /// An expression costing more than [`MAX_OPS_PER_SAMPLE`] operations per sample.
    #[error("expression needs more than {MAX_OPS_PER_SAMPLE} operations per sample at {0}")]
    TooCostly(String),
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
    /// A number, and its exact value when written as a plain decimal integer (`wgn`
    /// entropies are 64-bit: beyond 2^53 an f64 would round them).
    Num(f64, Option<u64>),
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
            let exact = text
                .bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| text.parse::<u64>().ok())
                .flatten();
            out.push((start, Tok::Num(v, exact)));
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

/// A parsed expression with the size of its tree, checked as it is built so that no
/// oversized tree is ever made (or evaluated, or dropped recursively).
#[derive(Clone)]
struct Node {
    sig: Arc<Signal>,
    /// Height of the tree (a leaf is 1).
    depth: u32,
    /// Operations per sample (shared subtrees counted at every use).
    ops: u64,
}

#[derive(Clone)]
enum Value {
    Sig(Node),
    NoDither(Node),
}

struct Parser<'a> {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    nesting: usize,
    vars: HashMap<String, Value>,
    entropy: &'a mut dyn FnMut() -> u64,
    /// Exact integer values of the current call's arguments ([`Tok::Num`]).
    exact: Vec<Option<u64>>,
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

    /// One level deeper into the parser's recursion; fails past [`MAX_NESTING`].
    fn enter(&mut self) -> Result<(), SignalError> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(SignalError::TooNested(self.where_()));
        }
        Ok(())
    }

    fn leaf(&self, sig: Signal, ops: u64) -> Result<Node, SignalError> {
        self.checked(Node {
            sig: Arc::new(sig),
            depth: 1,
            ops: ops.max(1),
        })
    }

    /// `sig` applied to `kids`: one level above the deepest, one operation more than all.
    fn node(&self, sig: Signal, kids: &[&Node]) -> Result<Node, SignalError> {
        self.checked(Node {
            sig: Arc::new(sig),
            depth: 1 + kids.iter().map(|k| k.depth).max().unwrap_or(0),
            ops: kids.iter().fold(1u64, |a, k| a.saturating_add(k.ops)),
        })
    }

    fn checked(&self, n: Node) -> Result<Node, SignalError> {
        if n.depth > MAX_OPERATOR_DEPTH {
            return Err(SignalError::TooDeep(self.where_()));
        }
        if n.ops > MAX_OPS_PER_SAMPLE {
            return Err(SignalError::TooCostly(self.where_()));
        }
        Ok(n)
    }

    fn number(&mut self) -> Result<f64, SignalError> {
        let neg = if self.peek() == Some(&Tok::Sym('-')) {
            self.pos += 1;
            true
        } else {
            false
        };
        match self.peek().cloned() {
            Some(Tok::Num(v, exact)) => {
                self.pos += 1;
                self.exact.push(if neg { None } else { exact });
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
                self.enter()?;
                let e = self.expr()?;
                self.nesting -= 1;
                self.expect(')')?;
                return Ok(Value::NoDither(e));
            }
        }
        Ok(Value::Sig(self.expr()?))
    }

    fn expr(&mut self) -> Result<Node, SignalError> {
        let mut lhs = self.term()?;
        loop {
            let op: fn(Arc<Signal>, Arc<Signal>) -> Signal = match self.peek() {
                Some(Tok::Sym('+')) => Signal::Add,
                Some(Tok::Sym('-')) => Signal::Sub,
                _ => return Ok(lhs),
            };
            self.pos += 1;
            let rhs = self.term()?;
            lhs = self.node(op(lhs.sig.clone(), rhs.sig.clone()), &[&lhs, &rhs])?;
        }
    }

    fn term(&mut self) -> Result<Node, SignalError> {
        let mut lhs = self.unary()?;
        while self.peek() == Some(&Tok::Sym('*')) {
            self.pos += 1;
            let rhs = self.unary()?;
            lhs = self.node(Signal::Mul(lhs.sig.clone(), rhs.sig.clone()), &[&lhs, &rhs])?;
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Node, SignalError> {
        if self.peek() == Some(&Tok::Sym('-')) {
            self.pos += 1;
            self.enter()?;
            let inner = self.unary()?;
            self.nesting -= 1;
            let zero = self.leaf(Signal::Const(0.0), 1)?;
            return self.node(
                Signal::Sub(zero.sig.clone(), inner.sig.clone()),
                &[&zero, &inner],
            );
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
        self.exact.clear();
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

    fn atom(&mut self) -> Result<Node, SignalError> {
        let tok = self.peek().cloned();
        match tok {
            Some(Tok::Num(v, _)) => {
                self.pos += 1;
                self.leaf(Signal::Const(v), 1)
            }
            Some(Tok::Sym('(')) => {
                self.pos += 1;
                self.enter()?;
                let e = self.expr()?;
                self.nesting -= 1;
                self.expect(')')?;
                Ok(e)
            }
            Some(Tok::Name(n)) => {
                self.pos += 1;
                match n.as_str() {
                    "cw" => {
                        let a = self.args("cw", 2, 2)?;
                        self.leaf(
                            Signal::Cw {
                                amp: a[0],
                                freq: a[1],
                            },
                            1,
                        )
                    }
                    "comb" => {
                        let a = self.args("comb", 2, 2)?;
                        self.leaf(
                            Signal::Comb {
                                amp: a[0],
                                freq: a[1],
                            },
                            1,
                        )
                    }
                    "multicw" => {
                        let a = self.args("multicw", 5, 5)?;
                        if a[0] < 0.0 || a[0].fract() != 0.0 || a[0] > 1e6 {
                            return Err(SignalError::Invalid(
                                "multicw: m must be a non-negative integer",
                            ));
                        }
                        // m cosines per sample.
                        self.leaf(
                            Signal::MultiCw {
                                m: a[0] as u32,
                                amp0: a[1],
                                amp_step: a[2],
                                freq0: a[3],
                                freq_step: a[4],
                            },
                            a[0] as u64,
                        )
                    }
                    "wgn" => {
                        let a = self.args("wgn", 1, 2)?;
                        if a[0] < 0.0 {
                            return Err(SignalError::Invalid("wgn: std must be non-negative"));
                        }
                        let entropy = match a.get(1) {
                            Some(_) if self.exact.get(1).copied().flatten().is_some() => {
                                self.exact[1].unwrap_or(0)
                            }
                            Some(&e) if e >= 0.0 && e.fract() == 0.0 && e < 1.8e19 => e as u64,
                            Some(_) => {
                                return Err(SignalError::Invalid(
                                    "wgn: entropy must be a non-negative integer",
                                ))
                            }
                            None => (self.entropy)(),
                        };
                        self.leaf(Signal::Wgn { std: a[0], entropy }, 1)
                    }
                    "delay" => {
                        self.expect('(')?;
                        self.enter()?;
                        let e = self.expr()?;
                        self.nesting -= 1;
                        self.expect(',')?;
                        let d = self.number()?;
                        self.expect(')')?;
                        if d.fract() != 0.0 || d.abs() > 1e15 {
                            return Err(SignalError::Invalid(
                                "delay: only integer sample delays are supported",
                            ));
                        }
                        self.node(Signal::Delay(e.sig.clone(), d as i64), &[&e])
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
    if src.len() > MAX_SOURCE_BYTES {
        return Err(SignalError::TooLong(src.len()));
    }
    let toks = tokenize(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        nesting: 0,
        vars: HashMap::new(),
        entropy,
        exact: Vec::new(),
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
                    signal: s.sig,
                    dither: true,
                },
                Value::NoDither(s) => StreamSignal {
                    signal: s.sig,
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
