//! Checker and lowering: syntax tree to the compact evaluation tree
//! ([`Node`], defined in `tree`), once per rule.
//!
//! Owns the static checks (unknown functions, arity, operand kinds that can
//! never be valid, the caller's expected result kind), the resolution of
//! dotted/indexed field paths into pre-split [`Path`]s, and constant folding
//! of subtrees that do not read the event.

use serde_json::Map;

use super::error::{CompileError, EvalError};
use super::eval;
use super::parser::{Ast, AstKind, BinOp, UnOp};
use super::tree::{Func, Node, Path, Seg};
use super::value::{Arith, Cmp, Kinds, Value};
use crate::event::Slot;

/// A compiled subtree with what the checker knows about it.
struct Compiled {
    node: Node,
    kinds: Kinds,
    /// True if the subtree never reads the event (a folding candidate).
    pure: bool,
}

pub(crate) struct Compiler {
    /// Top-level fields read, in order of first use.
    pub(crate) fields: Vec<String>,
    /// Guarded constant subtrees whose evaluation failed, innermost first,
    /// so that an expression that always fails is reported where it fails.
    fold_failures: Vec<(usize, EvalError)>,
    /// Number of enclosing `&&`/`||` operands and `?:` branches.
    guards: usize,
    empty: Map<String, serde_json::Value>,
}

fn err(pos: usize, message: impl Into<String>) -> CompileError {
    CompileError {
        position: pos,
        message: message.into(),
    }
}

fn mismatch(pos: usize, op: &str, l: Kinds, r: Kinds) -> CompileError {
    err(pos, format!("cannot apply '{op}' to {l} and {r}"))
}

impl Compiler {
    pub fn new() -> Compiler {
        Compiler {
            fields: Vec::new(),
            fold_failures: Vec::new(),
            guards: 0,
            empty: Map::new(),
        }
    }

    /// Compiles the whole tree; returns the node and its static kinds.
    pub(crate) fn compile_root(&mut self, ast: &Ast) -> Result<(Node, Kinds), CompileError> {
        let c = self.compile(ast)?;
        Ok((c.node, c.kinds))
    }

    fn note_field(&mut self, root: &str) {
        if !self.fields.iter().any(|f| f == root) {
            self.fields.push(root.to_owned());
        }
    }

    /// Folds a pure subtree to a constant when it evaluates successfully.
    /// If it fails and nothing around it can skip or absorb the error (no
    /// enclosing `&&`, `||` or `?:` branch), every evaluation would fail, so
    /// that is a compile error.
    fn finish(
        &mut self,
        node: Node,
        kinds: Kinds,
        pure: bool,
        pos: usize,
    ) -> Result<Compiled, CompileError> {
        if !pure || matches!(node, Node::Const(_)) {
            return Ok(Compiled { node, kinds, pure });
        }
        match eval::eval(&node, &self.empty).map(Value::into_static) {
            Ok(Some(v)) => {
                let kinds = Kinds::of(v.kind());
                Ok(Compiled {
                    node: Node::Const(v),
                    kinds,
                    pure,
                })
            }
            Ok(None) => Ok(Compiled { node, kinds, pure }),
            Err(e) if self.guards == 0 => {
                // Report where the error arises: the innermost subtree that
                // failed the same way, if any.
                let pos = self
                    .fold_failures
                    .iter()
                    .find(|(_, f)| *f == e)
                    .map_or(pos, |(p, _)| *p);
                Err(err(pos, format!("expression always fails: {e}")))
            }
            Err(e) => {
                self.fold_failures.push((pos, e));
                Ok(Compiled { node, kinds, pure })
            }
        }
    }

    /// Compiles a subtree whose errors may be skipped or absorbed.
    fn guarded(&mut self, ast: &Ast) -> Result<Compiled, CompileError> {
        self.guards += 1;
        let result = self.compile(ast);
        self.guards -= 1;
        result
    }

    fn compile(&mut self, ast: &Ast) -> Result<Compiled, CompileError> {
        let pos = ast.pos;
        let leaf = |v: Value<'static>| {
            let kinds = Kinds::of(v.kind());
            Ok(Compiled {
                node: Node::Const(v),
                kinds,
                pure: true,
            })
        };
        match &ast.kind {
            AstKind::Null => leaf(Value::Null),
            AstKind::Bool(b) => leaf(Value::Bool(*b)),
            AstKind::Int(i) => match i64::try_from(*i) {
                Ok(i) => leaf(Value::Int(i)),
                Err(_) => Err(err(pos, "integer literal out of range")),
            },
            AstKind::Double(d) => leaf(Value::Double(*d)),
            AstKind::Str(s) => leaf(Value::Str(s.clone().into())),
            AstKind::Ident(name) => Ok(self.field(name)),
            AstKind::Select(base, name) => self.select(base, name, pos),
            AstKind::Index(base, index) => self.index(base, index, pos),
            AstKind::Call(name, args) => self.call(name, args, pos),
            AstKind::List(items) => self.list(items, pos),
            AstKind::Unary(op, operand) => self.unary(*op, operand, pos),
            AstKind::Binary(op, l, r) => self.binary(*op, l, r, pos),
            AstKind::And(items) => self.logic(true, items, pos),
            AstKind::Or(items) => self.logic(false, items, pos),
            AstKind::Cond(c, a, b) => self.cond(c, a, b, pos),
        }
    }

    /// A top-level field name.
    fn field(&mut self, name: &str) -> Compiled {
        self.note_field(name);
        Compiled {
            node: Node::Field(Path {
                root: name.into(),
                slot: Slot::of(name),
                segs: Box::new([]),
                text: name.into(),
            }),
            kinds: Kinds::ANY,
            pure: false,
        }
    }

    /// `base.name`: extends a field path, or selects from a computed object.
    fn select(&mut self, base: &Ast, name: &str, pos: usize) -> Result<Compiled, CompileError> {
        let base = self.compile(base)?;
        if let Node::Field(path) = &base.node {
            let path = path.push(Seg::Key(name.into()));
            return Ok(Compiled {
                node: Node::Field(path),
                kinds: Kinds::ANY,
                pure: false,
            });
        }
        if !base.kinds.has(Kinds::OBJECT | Kinds::NULL) {
            return Err(err(
                pos,
                format!("cannot select field '{name}' from {}", base.kinds),
            ));
        }
        let node = Node::Select(Box::new(base.node), name.into());
        self.finish(node, Kinds::ANY, base.pure, pos)
    }

    fn list(&mut self, items: &[Ast], pos: usize) -> Result<Compiled, CompileError> {
        let mut nodes = Vec::with_capacity(items.len());
        let mut pure = true;
        for item in items {
            let c = self.compile(item)?;
            pure &= c.pure;
            nodes.push(c.node);
        }
        let node = Node::List(nodes.into_boxed_slice());
        self.finish(node, Kinds::LIST, pure, pos)
    }

    fn unary(&mut self, op: UnOp, operand: &Ast, pos: usize) -> Result<Compiled, CompileError> {
        let c = self.compile(operand)?;
        let (node, kinds) = match op {
            UnOp::Not => {
                if !c.kinds.has(Kinds::BOOL) {
                    return Err(err(pos, format!("cannot apply '!' to {}", c.kinds)));
                }
                (Node::Not(Box::new(c.node)), Kinds::BOOL)
            }
            UnOp::Neg => {
                if !c.kinds.has(Kinds::NUM) {
                    return Err(err(pos, format!("cannot apply '-' to {}", c.kinds)));
                }
                (Node::Neg(Box::new(c.node)), c.kinds.meet(Kinds::NUM))
            }
        };
        self.finish(node, kinds, c.pure, pos)
    }

    /// `a && b && ...` (`is_and`) or `a || b || ...`.
    fn logic(&mut self, is_and: bool, items: &[Ast], pos: usize) -> Result<Compiled, CompileError> {
        let mut nodes = Vec::with_capacity(items.len());
        let mut pure = true;
        for item in items {
            let c = self.guarded(item)?;
            if !c.kinds.has(Kinds::BOOL) {
                let op = if is_and { "&&" } else { "||" };
                return Err(err(
                    pos,
                    format!("operands of '{op}' must be bool, found {}", c.kinds),
                ));
            }
            pure &= c.pure;
            nodes.push(c.node);
        }
        let nodes = nodes.into_boxed_slice();
        let node = if is_and {
            Node::And(nodes)
        } else {
            Node::Or(nodes)
        };
        self.finish(node, Kinds::BOOL, pure, pos)
    }

    /// `c ? a : b`.
    fn cond(&mut self, c: &Ast, a: &Ast, b: &Ast, pos: usize) -> Result<Compiled, CompileError> {
        let c = self.compile(c)?;
        if !c.kinds.has(Kinds::BOOL) {
            return Err(err(
                pos,
                format!("condition of '?:' must be bool, found {}", c.kinds),
            ));
        }
        let a = self.guarded(a)?;
        let b = self.guarded(b)?;
        let pure = c.pure && a.pure && b.pure;
        let kinds = a.kinds.union(b.kinds);
        let node = Node::Cond(Box::new((c.node, a.node, b.node)));
        self.finish(node, kinds, pure, pos)
    }

    fn binary(
        &mut self,
        op: BinOp,
        l: &Ast,
        r: &Ast,
        pos: usize,
    ) -> Result<Compiled, CompileError> {
        let l = self.compile(l)?;
        let r = self.compile(r)?;
        let pure = l.pure && r.pure;
        let arith = match op {
            BinOp::Add => Some(Arith::Add),
            BinOp::Sub => Some(Arith::Sub),
            BinOp::Mul => Some(Arith::Mul),
            BinOp::Div => Some(Arith::Div),
            BinOp::Rem => Some(Arith::Rem),
            _ => None,
        };
        if let Some(a) = arith {
            let kinds = a.result_kinds(l.kinds, r.kinds);
            if kinds.is_empty() {
                return Err(mismatch(pos, op.symbol(), l.kinds, r.kinds));
            }
            let node = Node::Arith(a, Box::new((l.node, r.node)));
            return self.finish(node, kinds, pure, pos);
        }
        let cmp = match op {
            BinOp::Eq => Cmp::Eq,
            BinOp::Ne => Cmp::Ne,
            BinOp::Lt => Cmp::Lt,
            BinOp::Le => Cmp::Le,
            BinOp::Gt => Cmp::Gt,
            BinOp::Ge => Cmp::Ge,
            _ => {
                // `in`: a list (element equality) or a map (key presence).
                if !r.kinds.has(Kinds::LIST | Kinds::OBJECT) {
                    return Err(err(
                        pos,
                        format!("right side of 'in' must be a list, found {}", r.kinds),
                    ));
                }
                let node = Node::In(Box::new((l.node, r.node)));
                return self.finish(node, Kinds::BOOL, pure, pos);
            }
        };
        if !cmp.statically_valid(l.kinds, r.kinds) {
            return Err(mismatch(pos, op.symbol(), l.kinds, r.kinds));
        }
        let node = Node::Cmp(cmp, Box::new((l.node, r.node)));
        self.finish(node, Kinds::BOOL, pure, pos)
    }

    fn index(&mut self, base: &Ast, index: &Ast, pos: usize) -> Result<Compiled, CompileError> {
        let base = self.compile(base)?;
        let index = self.compile(index)?;
        // A constant key or index on a path extends the path, so that
        // `a["b"][0]` is navigated without intermediate values.
        if let Node::Field(path) = &base.node {
            let seg = match &index.node {
                Node::Const(Value::Str(k)) => Some(Seg::Key(k.as_ref().into())),
                Node::Const(Value::Int(i)) => usize::try_from(*i).ok().map(Seg::Index),
                _ => None,
            };
            if let Some(seg) = seg {
                return Ok(Compiled {
                    node: Node::Field(path.push(seg)),
                    kinds: Kinds::ANY,
                    pure: false,
                });
            }
        }
        let valid = (base.kinds.has(Kinds::LIST) && index.kinds.has(Kinds::INT))
            || (base.kinds.has(Kinds::OBJECT) && index.kinds.has(Kinds::STR));
        if !valid {
            return Err(err(
                pos,
                format!("cannot index {} with {}", base.kinds, index.kinds),
            ));
        }
        let pure = base.pure && index.pure;
        let node = Node::Index(Box::new((base.node, index.node)));
        self.finish(node, Kinds::ANY, pure, pos)
    }

    fn call(&mut self, name: &str, args: &[Ast], pos: usize) -> Result<Compiled, CompileError> {
        // All fixed-arity functions take exactly one argument.
        let arity_error = || {
            err(
                pos,
                format!("{name}() takes 1 argument, got {}", args.len()),
            )
        };
        let func = match name {
            "has" => {
                return match args {
                    [arg] => self.has(arg),
                    _ => Err(arity_error()),
                };
            }
            "string" => Func::String,
            "int" => Func::Int,
            "double" => Func::Double,
            "size" => Func::Size,
            "min" => Func::Min,
            "max" => Func::Max,
            _ => return Err(err(pos, format!("unknown function '{name}'"))),
        };
        let variadic = matches!(func, Func::Min | Func::Max);
        if variadic && args.is_empty() {
            return Err(err(pos, format!("{name}() takes at least 1 argument")));
        }
        if !variadic && args.len() != 1 {
            return Err(arity_error());
        }
        let mut nodes = Vec::with_capacity(args.len());
        let mut kinds = Vec::with_capacity(args.len());
        let mut pure = true;
        for arg in args {
            let c = self.compile(arg)?;
            pure &= c.pure;
            kinds.push(c.kinds);
            nodes.push(c.node);
        }
        let result = call_kinds(name, func, &kinds, pos)?;
        let node = Node::Call(func, nodes.into_boxed_slice());
        self.finish(node, result, pure, pos)
    }

    /// `has(a.b.c)`: the argument must be a field selection, not a value.
    fn has(&mut self, arg: &Ast) -> Result<Compiled, CompileError> {
        let path = has_path(arg).ok_or_else(|| {
            err(
                arg.pos,
                "has() requires a field selection argument such as has(a.b)",
            )
        })?;
        self.note_field(&path.root);
        Ok(Compiled {
            node: Node::Has(path),
            kinds: Kinds::BOOL,
            pure: false,
        })
    }
}

/// The kinds a function call yields, after checking its arguments' kinds.
fn call_kinds(name: &str, func: Func, kinds: &[Kinds], pos: usize) -> Result<Kinds, CompileError> {
    // Arity is checked by the caller: every function has a first argument.
    let first = kinds.first().copied().unwrap_or(Kinds::NONE);
    let bad =
        |accepted: &str, k: Kinds| err(pos, format!("{name}() accepts {accepted}, found {k}"));
    let need = |accepted: Kinds, text: &str, result: Kinds| {
        if first.has(accepted) {
            Ok(result)
        } else {
            Err(bad(text, first))
        }
    };
    match func {
        Func::String => need(
            Kinds::NUM | Kinds::STR | Kinds::BOOL,
            "a number, string or bool",
            Kinds::STR,
        ),
        Func::Int => need(Kinds::NUM | Kinds::STR, "a number or string", Kinds::INT),
        Func::Double => need(Kinds::NUM | Kinds::STR, "a number or string", Kinds::DOUBLE),
        Func::Size => need(
            Kinds::STR | Kinds::LIST | Kinds::OBJECT,
            "a string, list or map",
            Kinds::INT,
        ),
        // min([..]) over a list's elements.
        Func::Min | Func::Max if kinds.len() == 1 && first.has(Kinds::LIST) => Ok(Kinds::NUM),
        Func::Min | Func::Max => {
            let mut out = Kinds::NONE;
            for k in kinds {
                if !k.has(Kinds::NUM) {
                    return Err(bad("numbers", *k));
                }
                out = out.union(k.meet(Kinds::NUM));
            }
            Ok(out)
        }
    }
}

fn has_path(ast: &Ast) -> Option<Path> {
    match &ast.kind {
        AstKind::Ident(name) => Some(Path {
            root: name.as_str().into(),
            slot: Slot::of(name),
            segs: Box::new([]),
            text: name.as_str().into(),
        }),
        AstKind::Select(base, name) => {
            has_path(base).map(|p| p.push(Seg::Key(name.as_str().into())))
        }
        _ => None,
    }
}
