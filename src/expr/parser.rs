//! Recursive-descent parser: tokens to an untyped syntax tree, with CEL
//! operator precedence.
//!
//! Owns the nesting limit: both the parser's own recursion and the height
//! of the tree it builds are bounded by [`MAX_DEPTH`], so that neither the
//! parser nor the later compile/eval/drop recursions can overflow the stack
//! on hostile input.

use super::error::CompileError;
use super::lexer::{Tok, Token};

/// Maximum nesting of the expression (parentheses, operators, calls, ...).
pub(crate) const MAX_DEPTH: usize = 64;

/// Binary operators that keep two operands (`&&` and `||` are n-ary nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
}

impl BinOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::In => "in",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnOp {
    Not,
    Neg,
}

/// A syntax-tree node with the column it is reported at (the operator for
/// operators, the name for calls and selections, the first char otherwise).
#[derive(Debug, Clone)]
pub(crate) struct Ast {
    pub(crate) kind: AstKind,
    pub(crate) pos: usize,
    /// Height of this subtree (a leaf is 1), bounded by `MAX_DEPTH`.
    pub(crate) height: usize,
}

#[derive(Debug, Clone)]
pub(crate) enum AstKind {
    Null,
    Bool(bool),
    /// Wider than i64 so that a negated `9223372036854775808` still fits;
    /// the range is checked when compiling.
    Int(i128),
    Double(f64),
    Str(String),
    Ident(String),
    Select(Box<Ast>, String),
    Index(Box<Ast>, Box<Ast>),
    Call(String, Vec<Ast>),
    List(Vec<Ast>),
    Unary(UnOp, Box<Ast>),
    Binary(BinOp, Box<Ast>, Box<Ast>),
    /// Flattened chains: `a && b && c` is one node, which keeps long chains
    /// shallow. Semantics are unchanged because CEL's `&&`/`||` are
    /// associative, error absorption included.
    And(Vec<Ast>),
    Or(Vec<Ast>),
    Cond(Box<Ast>, Box<Ast>, Box<Ast>),
}

fn err(pos: usize, message: impl Into<String>) -> CompileError {
    CompileError {
        position: pos,
        message: message.into(),
    }
}

fn depth_error(pos: usize) -> CompileError {
    err(
        pos,
        format!("expression is nested too deeply (at most {MAX_DEPTH} levels)"),
    )
}

/// Builds a node, computing its height from its children.
fn node(kind: AstKind, pos: usize) -> Result<Ast, CompileError> {
    let child_height = match &kind {
        AstKind::Null
        | AstKind::Bool(_)
        | AstKind::Int(_)
        | AstKind::Double(_)
        | AstKind::Str(_)
        | AstKind::Ident(_) => 0,
        AstKind::Select(a, _) | AstKind::Unary(_, a) => a.height,
        AstKind::Index(a, b) | AstKind::Binary(_, a, b) => a.height.max(b.height),
        AstKind::Call(_, items)
        | AstKind::List(items)
        | AstKind::And(items)
        | AstKind::Or(items) => items.iter().map(|a| a.height).max().unwrap_or(0),
        AstKind::Cond(a, b, c) => a.height.max(b.height).max(c.height),
    };
    let height = child_height + 1;
    if height > MAX_DEPTH {
        return Err(depth_error(pos));
    }
    Ok(Ast { kind, pos, height })
}

pub(crate) fn parse(tokens: &[Token]) -> Result<Ast, CompileError> {
    let mut p = Parser {
        tokens,
        i: 0,
        depth: 0,
    };
    if matches!(p.peek(), Tok::Eof) {
        return Err(err(p.pos(), "empty expression"));
    }
    let ast = p.expr()?;
    if !matches!(p.peek(), Tok::Eof) {
        return Err(err(
            p.pos(),
            format!("unexpected {} after end of expression", p.peek().describe()),
        ));
    }
    Ok(ast)
}

struct Parser<'t> {
    tokens: &'t [Token],
    i: usize,
    /// Current recursion depth of `expr`/`unary`.
    depth: usize,
}

/// The `Eof` token every token list ends with; used if `i` ever runs past.
static EOF: Tok = Tok::Eof;

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        self.tokens.get(self.i).map_or(&EOF, |t| &t.tok)
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        self.tokens.get(self.i + ahead).map_or(&EOF, |t| &t.tok)
    }

    fn pos(&self) -> usize {
        self.tokens
            .get(self.i)
            .or_else(|| self.tokens.last())
            .map_or(1, |t| t.pos)
    }

    fn bump(&mut self) {
        if self.i < self.tokens.len() {
            self.i += 1;
        }
    }

    fn expect(&mut self, tok: &Tok, what: &str) -> Result<(), CompileError> {
        if self.peek() == tok {
            self.bump();
            Ok(())
        } else {
            Err(err(
                self.pos(),
                format!("expected {what}, found {}", self.peek().describe()),
            ))
        }
    }

    fn enter(&mut self) -> Result<(), CompileError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(depth_error(self.pos()));
        }
        Ok(())
    }

    /// expr = or ['?' or ':' expr]
    fn expr(&mut self) -> Result<Ast, CompileError> {
        self.enter()?;
        let result = self.ternary();
        self.depth -= 1;
        result
    }

    fn ternary(&mut self) -> Result<Ast, CompileError> {
        let cond = self.or()?;
        if !matches!(self.peek(), Tok::Question) {
            return Ok(cond);
        }
        let pos = self.pos();
        self.bump();
        let then = self.or()?;
        self.expect(&Tok::Colon, "':' of the conditional")?;
        let otherwise = self.expr()?;
        node(
            AstKind::Cond(Box::new(cond), Box::new(then), Box::new(otherwise)),
            pos,
        )
    }

    fn or(&mut self) -> Result<Ast, CompileError> {
        let first = self.and()?;
        if !matches!(self.peek(), Tok::OrOr) {
            return Ok(first);
        }
        let pos = self.pos();
        let mut items = vec![first];
        while matches!(self.peek(), Tok::OrOr) {
            self.bump();
            items.push(self.and()?);
        }
        node(AstKind::Or(items), pos)
    }

    fn and(&mut self) -> Result<Ast, CompileError> {
        let first = self.relation()?;
        if !matches!(self.peek(), Tok::AndAnd) {
            return Ok(first);
        }
        let pos = self.pos();
        let mut items = vec![first];
        while matches!(self.peek(), Tok::AndAnd) {
            self.bump();
            items.push(self.relation()?);
        }
        node(AstKind::And(items), pos)
    }

    fn relation(&mut self) -> Result<Ast, CompileError> {
        let mut lhs = self.additive()?;
        loop {
            let op = match self.peek() {
                Tok::Eq => BinOp::Eq,
                Tok::Ne => BinOp::Ne,
                Tok::Lt => BinOp::Lt,
                Tok::Le => BinOp::Le,
                Tok::Gt => BinOp::Gt,
                Tok::Ge => BinOp::Ge,
                Tok::In => BinOp::In,
                _ => return Ok(lhs),
            };
            let pos = self.pos();
            self.bump();
            let rhs = self.additive()?;
            lhs = node(AstKind::Binary(op, Box::new(lhs), Box::new(rhs)), pos)?;
        }
    }

    fn additive(&mut self) -> Result<Ast, CompileError> {
        let mut lhs = self.multiplicative()?;
        loop {
            let op = match self.peek() {
                Tok::Plus => BinOp::Add,
                Tok::Minus => BinOp::Sub,
                _ => return Ok(lhs),
            };
            let pos = self.pos();
            self.bump();
            let rhs = self.multiplicative()?;
            lhs = node(AstKind::Binary(op, Box::new(lhs), Box::new(rhs)), pos)?;
        }
    }

    fn multiplicative(&mut self) -> Result<Ast, CompileError> {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek() {
                Tok::Star => BinOp::Mul,
                Tok::Slash => BinOp::Div,
                Tok::Percent => BinOp::Rem,
                _ => return Ok(lhs),
            };
            let pos = self.pos();
            self.bump();
            let rhs = self.unary()?;
            lhs = node(AstKind::Binary(op, Box::new(lhs), Box::new(rhs)), pos)?;
        }
    }

    /// unary = ('!' | '-') unary | member
    fn unary(&mut self) -> Result<Ast, CompileError> {
        let op = match self.peek() {
            Tok::Not => UnOp::Not,
            Tok::Minus => UnOp::Neg,
            _ => return self.member(),
        };
        let pos = self.pos();
        self.bump();
        // A minus directly before an integer literal is part of the literal
        // (as in CEL's grammar), so that `-9223372036854775808`, whose
        // magnitude alone overflows, is valid. Not when member access
        // follows, which binds tighter than the minus.
        if let (UnOp::Neg, Tok::Int(v)) = (op, self.peek())
            && !matches!(self.peek_at(1), Tok::Dot | Tok::LBracket)
        {
            let v = -i128::from(*v);
            self.bump();
            return node(AstKind::Int(v), pos);
        }
        self.enter()?;
        let operand = self.unary();
        self.depth -= 1;
        node(AstKind::Unary(op, Box::new(operand?)), pos)
    }

    /// member = primary { '.' IDENT | '[' expr ']' }
    fn member(&mut self) -> Result<Ast, CompileError> {
        let mut base = self.primary()?;
        loop {
            match self.peek() {
                Tok::Dot => {
                    self.bump();
                    let pos = self.pos();
                    let Tok::Ident(name) = self.peek() else {
                        return Err(err(
                            pos,
                            format!(
                                "expected field name after '.', found {}",
                                self.peek().describe()
                            ),
                        ));
                    };
                    let name = name.clone();
                    self.bump();
                    if matches!(self.peek(), Tok::LParen) {
                        return Err(err(
                            pos,
                            format!(
                                "method calls are not supported ('.{name}(...)'); use the function form, e.g. size(x)"
                            ),
                        ));
                    }
                    base = node(AstKind::Select(Box::new(base), name), pos)?;
                }
                Tok::LBracket => {
                    let pos = self.pos();
                    self.bump();
                    let index = self.expr()?;
                    self.expect(&Tok::RBracket, "']'")?;
                    base = node(AstKind::Index(Box::new(base), Box::new(index)), pos)?;
                }
                _ => return Ok(base),
            }
        }
    }

    fn primary(&mut self) -> Result<Ast, CompileError> {
        let pos = self.pos();
        let kind = match self.peek().clone() {
            Tok::Int(v) => AstKind::Int(i128::from(v)),
            Tok::Double(v) => AstKind::Double(v),
            Tok::Str(s) => AstKind::Str(s),
            Tok::True => AstKind::Bool(true),
            Tok::False => AstKind::Bool(false),
            Tok::Null => AstKind::Null,
            Tok::Ident(name) => {
                if matches!(self.peek_at(1), Tok::LParen) {
                    self.bump();
                    self.bump();
                    let args = self.list_items(&Tok::RParen, "')'", false)?;
                    return node(AstKind::Call(name, args), pos);
                }
                AstKind::Ident(name)
            }
            Tok::LParen => {
                self.bump();
                let inner = self.expr()?;
                self.expect(&Tok::RParen, "')'")?;
                return Ok(inner);
            }
            Tok::LBracket => {
                self.bump();
                let items = self.list_items(&Tok::RBracket, "']'", true)?;
                return node(AstKind::List(items), pos);
            }
            Tok::Dot => {
                return Err(err(
                    pos,
                    "leading '.' (root-qualified names) is not supported",
                ));
            }
            other => {
                return Err(err(
                    pos,
                    format!("unexpected {}, expected an expression", other.describe()),
                ));
            }
        };
        self.bump();
        node(kind, pos)
    }

    /// Comma-separated expressions up to `close` (already past the opener).
    fn list_items(
        &mut self,
        close: &Tok,
        close_name: &str,
        allow_trailing_comma: bool,
    ) -> Result<Vec<Ast>, CompileError> {
        let mut items = Vec::new();
        if self.peek() == close {
            self.bump();
            return Ok(items);
        }
        loop {
            items.push(self.expr()?);
            match self.peek() {
                Tok::Comma => {
                    self.bump();
                    if allow_trailing_comma && self.peek() == close {
                        self.bump();
                        return Ok(items);
                    }
                }
                t if t == close => {
                    self.bump();
                    return Ok(items);
                }
                other => {
                    return Err(err(
                        self.pos(),
                        format!("expected ',' or {close_name}, found {}", other.describe()),
                    ));
                }
            }
        }
    }
}
