//! Lexer for the rule expression language: turns source text into tokens,
//! each tagged with the 1-based character column where it starts.
//!
//! Owns literal decoding (numbers, the CEL string escapes, raw and
//! triple-quoted strings) so the parser only deals with structure.

use super::error::CompileError;

/// One lexical token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// An integer literal's magnitude; the sign is a separate `Minus` token
    /// so that `-9223372036854775808` can be folded by the parser.
    Int(u64),
    Double(f64),
    Str(String),
    Ident(String),
    True,
    False,
    Null,
    In,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Dot,
    Comma,
    Question,
    Colon,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Not,
    AndAnd,
    OrOr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Eof,
}

impl Tok {
    /// How the token is shown in "unexpected ..." messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Int(v) => format!("number {v}"),
            Tok::Double(v) => format!("number {v}"),
            Tok::Str(_) => "string literal".to_owned(),
            Tok::Ident(name) => format!("'{name}'"),
            Tok::True => "'true'".to_owned(),
            Tok::False => "'false'".to_owned(),
            Tok::Null => "'null'".to_owned(),
            Tok::In => "'in'".to_owned(),
            Tok::LParen => "'('".to_owned(),
            Tok::RParen => "')'".to_owned(),
            Tok::LBracket => "'['".to_owned(),
            Tok::RBracket => "']'".to_owned(),
            Tok::Dot => "'.'".to_owned(),
            Tok::Comma => "','".to_owned(),
            Tok::Question => "'?'".to_owned(),
            Tok::Colon => "':'".to_owned(),
            Tok::Plus => "'+'".to_owned(),
            Tok::Minus => "'-'".to_owned(),
            Tok::Star => "'*'".to_owned(),
            Tok::Slash => "'/'".to_owned(),
            Tok::Percent => "'%'".to_owned(),
            Tok::Not => "'!'".to_owned(),
            Tok::AndAnd => "'&&'".to_owned(),
            Tok::OrOr => "'||'".to_owned(),
            Tok::Eq => "'=='".to_owned(),
            Tok::Ne => "'!='".to_owned(),
            Tok::Lt => "'<'".to_owned(),
            Tok::Le => "'<='".to_owned(),
            Tok::Gt => "'>'".to_owned(),
            Tok::Ge => "'>='".to_owned(),
            Tok::Eof => "end of expression".to_owned(),
        }
    }
}

/// A token and its 1-based character column.
#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) pos: usize,
}

fn err(pos: usize, message: impl Into<String>) -> CompileError {
    CompileError {
        position: pos,
        message: message.into(),
    }
}

/// Tokenizes the whole source. The caller has already bounded its length,
/// so collecting into vectors is cheap and keeps the lexer simple.
pub(crate) fn tokenize(source: &str) -> Result<Vec<Token>, CompileError> {
    let chars: Vec<char> = source.chars().collect();
    let mut lx = Lexer {
        chars: &chars,
        i: 0,
    };
    let mut out = Vec::new();
    loop {
        lx.skip_trivia();
        let pos = lx.i + 1;
        let Some(c) = lx.peek(0) else {
            out.push(Token { tok: Tok::Eof, pos });
            return Ok(out);
        };
        let tok = lx.token(c, pos)?;
        out.push(Token { tok, pos });
    }
}

struct Lexer<'a> {
    chars: &'a [char],
    /// Index of the next unread char; the column of that char is `i + 1`.
    i: usize,
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.i + ahead).copied()
    }

    /// Skips whitespace and `//` line comments (CEL allows both).
    fn skip_trivia(&mut self) {
        loop {
            match self.peek(0) {
                Some(c) if c.is_whitespace() => self.i += 1,
                Some('/') if self.peek(1) == Some('/') => {
                    while let Some(c) = self.peek(0) {
                        if c == '\n' {
                            break;
                        }
                        self.i += 1;
                    }
                }
                _ => return,
            }
        }
    }

    fn token(&mut self, c: char, pos: usize) -> Result<Tok, CompileError> {
        // Two-char operators first.
        let two = |lx: &mut Self, tok: Tok| {
            lx.i += 2;
            Ok(tok)
        };
        let next = self.peek(1);
        match (c, next) {
            ('&', Some('&')) => return two(self, Tok::AndAnd),
            ('|', Some('|')) => return two(self, Tok::OrOr),
            ('=', Some('=')) => return two(self, Tok::Eq),
            ('!', Some('=')) => return two(self, Tok::Ne),
            ('<', Some('=')) => return two(self, Tok::Le),
            ('>', Some('=')) => return two(self, Tok::Ge),
            _ => {}
        }
        let single = match c {
            '(' => Some(Tok::LParen),
            ')' => Some(Tok::RParen),
            '[' => Some(Tok::LBracket),
            ']' => Some(Tok::RBracket),
            ',' => Some(Tok::Comma),
            '?' => Some(Tok::Question),
            ':' => Some(Tok::Colon),
            '+' => Some(Tok::Plus),
            '-' => Some(Tok::Minus),
            '*' => Some(Tok::Star),
            '/' => Some(Tok::Slash),
            '%' => Some(Tok::Percent),
            '!' => Some(Tok::Not),
            '<' => Some(Tok::Lt),
            '>' => Some(Tok::Gt),
            // A dot followed by a digit starts a double like `.5`.
            '.' if !next.is_some_and(|d| d.is_ascii_digit()) => Some(Tok::Dot),
            _ => None,
        };
        if let Some(tok) = single {
            self.i += 1;
            return Ok(tok);
        }
        match c {
            '=' => Err(err(pos, "unexpected '=' (use '==' for equality)")),
            '&' => Err(err(pos, "unexpected '&' (use '&&' for logical and)")),
            '|' => Err(err(pos, "unexpected '|' (use '||' for logical or)")),
            '{' | '}' => Err(err(pos, "map and message literals are not supported")),
            '"' | '\'' => self.string(pos, false),
            'r' | 'R' if matches!(next, Some('"' | '\'')) => {
                self.i += 1;
                self.string(pos, true)
            }
            'b' | 'B' if matches!(next, Some('"' | '\'')) => {
                Err(err(pos, "bytes literals are not supported"))
            }
            c if c.is_ascii_digit() || c == '.' => self.number(pos),
            c if c == '_' || c.is_ascii_alphabetic() => Ok(self.ident()),
            other => Err(err(pos, format!("unexpected character '{other}'"))),
        }
    }

    fn ident(&mut self) -> Tok {
        let start = self.i;
        while self
            .peek(0)
            .is_some_and(|c| c == '_' || c.is_ascii_alphanumeric())
        {
            self.i += 1;
        }
        let word: String = self.chars[start..self.i].iter().collect();
        match word.as_str() {
            "true" => Tok::True,
            "false" => Tok::False,
            "null" => Tok::Null,
            "in" => Tok::In,
            _ => Tok::Ident(word),
        }
    }

    fn number(&mut self, pos: usize) -> Result<Tok, CompileError> {
        let start = self.i;
        // Hexadecimal integer.
        if self.peek(0) == Some('0') && matches!(self.peek(1), Some('x' | 'X')) {
            self.i += 2;
            let digits_start = self.i;
            while self.peek(0).is_some_and(|c| c.is_ascii_hexdigit()) {
                self.i += 1;
            }
            if self.i == digits_start {
                return Err(err(pos, "hexadecimal literal has no digits"));
            }
            let text: String = self.chars[digits_start..self.i].iter().collect();
            self.reject_suffix(pos)?;
            return u64::from_str_radix(&text, 16)
                .map(Tok::Int)
                .map_err(|_| err(pos, "integer literal out of range"));
        }
        let mut is_double = false;
        while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        // A fraction needs a digit after the dot (CEL: `1.` is not a double,
        // and `1.a` would be member access on a literal).
        if self.peek(0) == Some('.') && self.peek(1).is_some_and(|c| c.is_ascii_digit()) {
            is_double = true;
            self.i += 1;
            while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
        }
        if matches!(self.peek(0), Some('e' | 'E')) {
            let mut j = 1;
            if matches!(self.peek(1), Some('+' | '-')) {
                j = 2;
            }
            if self.peek(j).is_some_and(|c| c.is_ascii_digit()) {
                is_double = true;
                self.i += j;
                while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
            } else {
                return Err(err(pos, "exponent has no digits"));
            }
        }
        let text: String = self.chars[start..self.i].iter().collect();
        self.reject_suffix(pos)?;
        if is_double {
            let value: f64 = text
                .parse()
                .map_err(|_| err(pos, "invalid double literal"))?;
            if !value.is_finite() {
                return Err(err(pos, "double literal out of range"));
            }
            Ok(Tok::Double(value))
        } else {
            text.parse::<u64>()
                .map(Tok::Int)
                .map_err(|_| err(pos, "integer literal out of range"))
        }
    }

    /// Numbers must not run into identifier characters (`1abc`); the `u`
    /// suffix of CEL unsigned literals gets its own message.
    fn reject_suffix(&self, pos: usize) -> Result<(), CompileError> {
        match self.peek(0) {
            Some('u' | 'U') => Err(err(pos, "unsigned integer literals are not supported")),
            Some(c) if c == '_' || c.is_ascii_alphanumeric() => {
                Err(err(pos, "invalid number literal"))
            }
            _ => Ok(()),
        }
    }

    /// Lexes a quoted string whose opening quote is at `self.i`.
    fn string(&mut self, pos: usize, raw: bool) -> Result<Tok, CompileError> {
        let Some(quote) = self.peek(0) else {
            return Err(err(pos, "unterminated string literal"));
        };
        let triple = self.peek(1) == Some(quote) && self.peek(2) == Some(quote);
        self.i += if triple { 3 } else { 1 };
        let mut out = String::new();
        loop {
            let Some(c) = self.peek(0) else {
                return Err(err(pos, "unterminated string literal"));
            };
            if c == quote {
                if !triple {
                    self.i += 1;
                    return Ok(Tok::Str(out));
                }
                if self.peek(1) == Some(quote) && self.peek(2) == Some(quote) {
                    self.i += 3;
                    return Ok(Tok::Str(out));
                }
            }
            if (c == '\n' || c == '\r') && !triple {
                return Err(err(pos, "unterminated string literal"));
            }
            if c == '\\' && !raw {
                let esc_pos = self.i + 1;
                self.i += 1;
                out.push(self.escape(esc_pos)?);
                continue;
            }
            out.push(c);
            self.i += 1;
        }
    }

    /// Decodes one escape sequence; `self.i` is just past the backslash.
    fn escape(&mut self, esc_pos: usize) -> Result<char, CompileError> {
        let Some(c) = self.peek(0) else {
            return Err(err(esc_pos, "unterminated escape sequence"));
        };
        self.i += 1;
        let simple = match c {
            'a' => Some('\u{07}'),
            'b' => Some('\u{08}'),
            'f' => Some('\u{0C}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{0B}'),
            '\\' => Some('\\'),
            '\'' => Some('\''),
            '"' => Some('"'),
            '`' => Some('`'),
            '?' => Some('?'),
            _ => None,
        };
        if let Some(ch) = simple {
            return Ok(ch);
        }
        let (radix, len) = match c {
            'x' | 'X' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            '0'..='3' => {
                // Octal escape: the digit just consumed is the first of three.
                self.i -= 1;
                (8, 3)
            }
            other => return Err(err(esc_pos, format!("invalid escape sequence '\\{other}'"))),
        };
        let mut code: u32 = 0;
        for _ in 0..len {
            let digit = self
                .peek(0)
                .and_then(|d| d.to_digit(radix))
                .ok_or_else(|| err(esc_pos, "invalid escape sequence"))?;
            code = code * radix + digit;
            self.i += 1;
        }
        char::from_u32(code).ok_or_else(|| {
            err(
                esc_pos,
                format!("escape sequence is not a valid code point (U+{code:X})"),
            )
        })
    }
}
