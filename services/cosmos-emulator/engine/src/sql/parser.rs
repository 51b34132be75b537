//! Recursive-descent parser for the Cosmos SQL subset (see the crate README for the grammar).

use super::lexer::{tokenize, Token};
use super::SqlError;

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Literal(serde_json::Value),
    Undefined,
    Param(String),
    /// A property path rooted at the FROM alias: `c.a.b[0]` is `["a","b",0]`.
    Path(Vec<PathStep>),
    /// The FROM alias itself (`c` in `SELECT VALUE c`).
    Root,
    Unary(UnaryOp, Box<Expr>),
    /// A comparison (`=`, `!=`, `<`, …): comparisons do not chain.
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// Operators of one precedence level applied left to right: `a AND b AND c`,
    /// `x + y - z`. One node however long, so a long chain never deepens the tree
    /// (every walk over it is recursive).
    Chain(Box<Expr>, Vec<(BinaryOp, Expr)>),
    In {
        needle: Box<Expr>,
        list: Vec<Expr>,
        negated: bool,
    },
    Between(Box<Expr>, Box<Expr>, Box<Expr>),
    Call(Function, Vec<Expr>),
    Aggregate(Aggregate, Box<Expr>),
    Array(Vec<Expr>),
    /// An object constructor `{name: expr, …}`; undefined values leave their name out.
    Object(Vec<(String, Expr)>),
}

impl Expr {
    /// Calls `visit` on each expression directly inside this one, in source order.
    pub fn for_each_child<'a>(&'a self, visit: &mut dyn FnMut(&'a Expr)) {
        match self {
            Expr::Literal(_) | Expr::Undefined | Expr::Param(_) | Expr::Root => {}
            Expr::Path(steps) => {
                for step in steps {
                    if let PathStep::Index(index) = step {
                        visit(index);
                    }
                }
            }
            Expr::Unary(_, inner) | Expr::Aggregate(_, inner) => visit(inner),
            Expr::Binary(_, left, right) => {
                visit(left);
                visit(right);
            }
            Expr::Chain(first, rest) => {
                visit(first);
                rest.iter().for_each(|(_, operand)| visit(operand));
            }
            Expr::In { needle, list, .. } => {
                visit(needle);
                list.iter().for_each(&mut *visit);
            }
            Expr::Between(a, b, c) => {
                visit(a);
                visit(b);
                visit(c);
            }
            Expr::Call(_, items) | Expr::Array(items) => items.iter().for_each(&mut *visit),
            Expr::Object(fields) => fields.iter().for_each(|(_, value)| visit(value)),
        }
    }

    /// [`Expr::for_each_child`] with mutable access, stopping at the first error.
    pub fn try_for_each_child_mut(
        &mut self,
        visit: &mut dyn FnMut(&mut Expr) -> Result<(), SqlError>,
    ) -> Result<(), SqlError> {
        match self {
            Expr::Literal(_) | Expr::Undefined | Expr::Param(_) | Expr::Root => Ok(()),
            Expr::Path(steps) => steps.iter_mut().try_for_each(|step| match step {
                PathStep::Index(index) => visit(index),
                PathStep::Field(_) => Ok(()),
            }),
            Expr::Unary(_, inner) | Expr::Aggregate(_, inner) => visit(inner),
            Expr::Binary(_, left, right) => {
                visit(left)?;
                visit(right)
            }
            Expr::Chain(first, rest) => {
                visit(first)?;
                rest.iter_mut().try_for_each(|(_, operand)| visit(operand))
            }
            Expr::In { needle, list, .. } => {
                visit(needle)?;
                list.iter_mut().try_for_each(&mut *visit)
            }
            Expr::Between(a, b, c) => {
                visit(a)?;
                visit(b)?;
                visit(c)
            }
            Expr::Call(_, items) | Expr::Array(items) => items.iter_mut().try_for_each(&mut *visit),
            Expr::Object(fields) => fields.iter_mut().try_for_each(|(_, value)| visit(value)),
        }
    }

    /// True if an aggregate appears anywhere in this expression.
    pub fn contains_aggregate(&self) -> bool {
        if let Expr::Aggregate(..) = self {
            return true;
        }
        let mut found = false;
        self.for_each_child(&mut |child| found = found || child.contains_aggregate());
        found
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum PathStep {
    Field(String),
    Index(Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryOp {
    Not,
    Neg,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BinaryOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Concat,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Function {
    IsDefined,
    IsNull,
    StartsWith,
    Contains,
    ArrayContains,
    Lower,
    Upper,
    Length,
    Abs,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Aggregate {
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SortOrder {
    Ascending,
    Descending,
}

/// `OFFSET offset LIMIT limit`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OffsetLimit {
    pub offset: u64,
    pub limit: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Projection {
    Star,
    Value(Expr),
    Fields(Vec<(String, Expr)>),
}

impl Projection {
    /// Its expressions, in order (none for `SELECT *`).
    pub fn exprs(&self) -> impl Iterator<Item = &Expr> {
        let (value, fields) = match self {
            Projection::Star => (None, &[][..]),
            Projection::Value(expr) => (Some(expr), &[][..]),
            Projection::Fields(fields) => (None, fields.as_slice()),
        };
        value.into_iter().chain(fields.iter().map(|(_, expr)| expr))
    }

    /// [`Projection::exprs`], mutable.
    pub fn exprs_mut(&mut self) -> impl Iterator<Item = &mut Expr> {
        let (value, fields) = match self {
            Projection::Star => (None, &mut [][..]),
            Projection::Value(expr) => (Some(expr), &mut [][..]),
            Projection::Fields(fields) => (None, fields.as_mut_slice()),
        };
        value
            .into_iter()
            .chain(fields.iter_mut().map(|(_, expr)| expr))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub distinct: bool,
    pub top: Option<u64>,
    pub projection: Projection,
    pub alias: String,
    pub filter: Option<Expr>,
    pub group_by: Vec<Expr>,
    pub order_by: Vec<(Expr, SortOrder)>,
    pub offset_limit: Option<OffsetLimit>,
}

impl Query {
    /// True when the projection computes aggregates (one row per group, or one in all).
    pub fn is_aggregate(&self) -> bool {
        self.projection_exprs().any(Expr::contains_aggregate)
    }

    /// True when the projection is exactly one aggregate: `SELECT VALUE COUNT(1)`.
    pub fn is_value_aggregate(&self) -> bool {
        matches!(self.projection, Projection::Value(Expr::Aggregate(..)))
    }

    /// The projection's expressions (none for `SELECT *`).
    pub fn projection_exprs(&self) -> impl Iterator<Item = &Expr> {
        self.projection.exprs()
    }

    /// True when rows can be returned as documents are read, so a page resumes at a
    /// document: no grouping, aggregate, sort, de-duplication or offset.
    pub fn is_streaming(&self) -> bool {
        !self.is_aggregate()
            && self.group_by.is_empty()
            && self.order_by.is_empty()
            && !self.distinct
            && self.offset_limit.is_none()
    }
}

/// Parses one `SELECT` statement.
pub fn parse(text: &str) -> Result<Query, SqlError> {
    let tokens = tokenize(text)?;
    let mut parser = Parser { tokens, pos: 0 };
    let query = parser.query()?;
    if let Some(token) = parser.peek() {
        return Err(SqlError::new(format!(
            "unexpected {} after the end of the query",
            describe(token)
        )));
    }
    Ok(query)
}

/// Nesting limit that keeps hostile input from overflowing the stack.
const MAX_DEPTH: usize = 64;

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

fn describe(token: &Token) -> String {
    match token {
        Token::Ident(word) => format!("'{word}'"),
        Token::Param(name) => format!("parameter '{name}'"),
        Token::Str(_) => "string literal".to_owned(),
        Token::Num(n) => format!("number {n}"),
        Token::Symbol(s) => format!("'{s}'"),
    }
}

fn is_keyword(token: Option<&Token>, keyword: &str) -> bool {
    matches!(token, Some(Token::Ident(word)) if word.eq_ignore_ascii_case(keyword))
}

/// Keywords, never identifiers: `FROM c GROUP BY …` must not read `GROUP` as an alias.
const RESERVED: [&str; 20] = [
    "SELECT", "FROM", "WHERE", "AND", "OR", "NOT", "IN", "BETWEEN", "VALUE", "TOP", "AS", "ORDER",
    "BY", "GROUP", "OFFSET", "LIMIT", "JOIN", "DISTINCT", "ASC", "DESC",
];

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn peek_at(&self, offset: usize) -> Option<&Token> {
        self.tokens.get(self.pos + offset)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        token
    }

    fn eat_keyword(&mut self, keyword: &str) -> bool {
        if is_keyword(self.peek(), keyword) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_keyword(&mut self, keyword: &str) -> Result<(), SqlError> {
        if self.eat_keyword(keyword) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("keyword {keyword}")))
        }
    }

    fn eat_symbol(&mut self, symbol: &str) -> bool {
        if matches!(self.peek(), Some(Token::Symbol(s)) if *s == symbol) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_symbol(&mut self, symbol: &str) -> Result<(), SqlError> {
        if self.eat_symbol(symbol) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("'{symbol}'")))
        }
    }

    fn unexpected(&self, wanted: &str) -> SqlError {
        match self.peek() {
            Some(token) => SqlError::new(format!("expected {wanted}, found {}", describe(token))),
            None => SqlError::new(format!("expected {wanted}, found the end of the query")),
        }
    }

    fn ident(&mut self) -> Result<String, SqlError> {
        match self.peek() {
            Some(Token::Ident(word)) if !RESERVED.iter().any(|r| word.eq_ignore_ascii_case(r)) => {
                let word = word.clone();
                self.pos += 1;
                Ok(word)
            }
            _ => Err(self.unexpected("an identifier")),
        }
    }

    fn query(&mut self) -> Result<Query, SqlError> {
        self.expect_keyword("SELECT")?;
        let distinct = self.eat_keyword("DISTINCT");
        let top = if self.eat_keyword("TOP") {
            Some(self.count("TOP")?)
        } else {
            None
        };
        let projection = self.projection()?;
        let alias = self.alias_clause()?;
        let filter = if self.eat_keyword("WHERE") {
            Some(self.expr(0)?)
        } else {
            None
        };
        let group_by = self.group_by()?;
        let order_by = self.order_by()?;
        let offset_limit = self.offset_limit()?;
        if top.is_some() && offset_limit.is_some() {
            return Err(SqlError::new(
                "TOP and OFFSET/LIMIT cannot be used in the same query",
            ));
        }
        let query = Query {
            distinct,
            top,
            projection,
            alias,
            filter,
            group_by,
            order_by,
            offset_limit,
        };
        query.bind_alias()
    }

    /// `*`, `VALUE expr`, or `expr [AS name], …`.
    fn projection(&mut self) -> Result<Projection, SqlError> {
        if self.eat_symbol("*") {
            return Ok(Projection::Star);
        }
        if self.eat_keyword("VALUE") {
            return Ok(Projection::Value(self.expr(0)?));
        }
        let mut fields = Vec::new();
        loop {
            let expr = self.expr(0)?;
            let name = if self.eat_keyword("AS") {
                self.ident()?
            } else if let Some(Token::Ident(word)) = self.peek() {
                if RESERVED.iter().any(|r| word.eq_ignore_ascii_case(r)) {
                    default_name(&expr, fields.len())
                } else {
                    self.ident()?
                }
            } else {
                default_name(&expr, fields.len())
            };
            fields.push((name, expr));
            if !self.eat_symbol(",") {
                break;
            }
        }
        Ok(Projection::Fields(fields))
    }

    /// `FROM alias [[AS] other]`: the name documents go by in the query.
    fn alias_clause(&mut self) -> Result<String, SqlError> {
        self.expect_keyword("FROM")?;
        let alias = self.ident()?;
        if self.eat_keyword("JOIN") || is_keyword(self.peek(), "IN") {
            return Err(SqlError::new("JOIN is not supported by this emulator"));
        }
        // `FROM root r` / `FROM c AS x` rebinds the alias.
        let rebinds = self.eat_keyword("AS")
            || matches!(self.peek(), Some(Token::Ident(w))
                if !RESERVED.iter().any(|r| w.eq_ignore_ascii_case(r)) && !w.eq_ignore_ascii_case("WHERE"));
        if rebinds {
            self.ident()
        } else {
            Ok(alias)
        }
    }

    /// `GROUP BY expr, …`, if there.
    fn group_by(&mut self) -> Result<Vec<Expr>, SqlError> {
        let mut group_by = Vec::new();
        if self.eat_keyword("GROUP") {
            self.expect_keyword("BY")?;
            loop {
                group_by.push(self.expr(0)?);
                if !self.eat_symbol(",") {
                    break;
                }
            }
        }
        Ok(group_by)
    }

    /// `ORDER BY expr [ASC|DESC], …`, if there.
    fn order_by(&mut self) -> Result<Vec<(Expr, SortOrder)>, SqlError> {
        let mut order_by = Vec::new();
        if self.eat_keyword("ORDER") {
            self.expect_keyword("BY")?;
            loop {
                let expr = self.expr(0)?;
                let order = if self.eat_keyword("DESC") {
                    SortOrder::Descending
                } else {
                    self.eat_keyword("ASC");
                    SortOrder::Ascending
                };
                order_by.push((expr, order));
                if !self.eat_symbol(",") {
                    break;
                }
            }
        }
        Ok(order_by)
    }

    /// `OFFSET n LIMIT m`, if there.
    fn offset_limit(&mut self) -> Result<Option<OffsetLimit>, SqlError> {
        if !self.eat_keyword("OFFSET") {
            return Ok(None);
        }
        let offset = self.count("OFFSET")?;
        self.expect_keyword("LIMIT")?;
        let limit = self.count("LIMIT")?;
        Ok(Some(OffsetLimit { offset, limit }))
    }

    /// The non-negative integer literal after `TOP`, `OFFSET` or `LIMIT`.
    fn count(&mut self, clause: &str) -> Result<u64, SqlError> {
        match self.next() {
            Some(Token::Num(n)) if n >= 0.0 && n.fract() == 0.0 && n <= u32::MAX as f64 => {
                Ok(n as u64)
            }
            _ => Err(SqlError::new(format!(
                "{clause} needs a non-negative integer literal"
            ))),
        }
    }

    fn expr(&mut self, depth: usize) -> Result<Expr, SqlError> {
        if depth > MAX_DEPTH {
            return Err(SqlError::new("expression is nested too deeply"));
        }
        self.or(depth + 1)
    }

    fn or(&mut self, depth: usize) -> Result<Expr, SqlError> {
        let first = self.and(depth)?;
        let mut rest = Vec::new();
        while self.eat_keyword("OR") {
            rest.push((BinaryOp::Or, self.and(depth)?));
        }
        Ok(chain(first, rest))
    }

    fn and(&mut self, depth: usize) -> Result<Expr, SqlError> {
        let first = self.not(depth)?;
        let mut rest = Vec::new();
        while self.eat_keyword("AND") {
            rest.push((BinaryOp::And, self.not(depth)?));
        }
        Ok(chain(first, rest))
    }

    fn not(&mut self, depth: usize) -> Result<Expr, SqlError> {
        if self.eat_keyword("NOT") {
            if depth > MAX_DEPTH {
                return Err(SqlError::new("expression is nested too deeply"));
            }
            let inner = self.not(depth + 1)?;
            return Ok(Expr::Unary(UnaryOp::Not, Box::new(inner)));
        }
        self.comparison(depth)
    }

    fn comparison(&mut self, depth: usize) -> Result<Expr, SqlError> {
        let left = self.additive(depth)?;
        let negated = is_keyword(self.peek(), "NOT") && is_keyword(self.peek_at(1), "IN");
        if negated {
            self.pos += 1;
        }
        if self.eat_keyword("IN") {
            self.expect_symbol("(")?;
            let mut list = Vec::new();
            if !self.eat_symbol(")") {
                loop {
                    list.push(self.expr(depth)?);
                    if self.eat_symbol(")") {
                        break;
                    }
                    self.expect_symbol(",")?;
                }
            }
            return Ok(Expr::In {
                needle: Box::new(left),
                list,
                negated,
            });
        }
        if self.eat_keyword("BETWEEN") {
            let low = self.additive(depth)?;
            self.expect_keyword("AND")?;
            let high = self.additive(depth)?;
            return Ok(Expr::Between(Box::new(left), Box::new(low), Box::new(high)));
        }
        let op = match self.peek() {
            Some(Token::Symbol("=")) => BinaryOp::Eq,
            Some(Token::Symbol("!=")) | Some(Token::Symbol("<>")) => BinaryOp::Ne,
            Some(Token::Symbol("<")) => BinaryOp::Lt,
            Some(Token::Symbol("<=")) => BinaryOp::Le,
            Some(Token::Symbol(">")) => BinaryOp::Gt,
            Some(Token::Symbol(">=")) => BinaryOp::Ge,
            _ => return Ok(left),
        };
        self.pos += 1;
        let right = self.additive(depth)?;
        Ok(Expr::Binary(op, Box::new(left), Box::new(right)))
    }

    fn additive(&mut self, depth: usize) -> Result<Expr, SqlError> {
        let first = self.multiplicative(depth)?;
        let mut rest = Vec::new();
        loop {
            let op = match self.peek() {
                Some(Token::Symbol("+")) => BinaryOp::Add,
                Some(Token::Symbol("-")) => BinaryOp::Sub,
                Some(Token::Symbol("||")) => BinaryOp::Concat,
                _ => return Ok(chain(first, rest)),
            };
            self.pos += 1;
            rest.push((op, self.multiplicative(depth)?));
        }
    }

    fn multiplicative(&mut self, depth: usize) -> Result<Expr, SqlError> {
        let first = self.unary(depth)?;
        let mut rest = Vec::new();
        loop {
            let op = match self.peek() {
                Some(Token::Symbol("*")) => BinaryOp::Mul,
                Some(Token::Symbol("/")) => BinaryOp::Div,
                _ => return Ok(chain(first, rest)),
            };
            self.pos += 1;
            rest.push((op, self.unary(depth)?));
        }
    }

    fn unary(&mut self, depth: usize) -> Result<Expr, SqlError> {
        if self.eat_symbol("-") {
            if depth > MAX_DEPTH {
                return Err(SqlError::new("expression is nested too deeply"));
            }
            let inner = self.unary(depth + 1)?;
            // `-3` is the number -3, so printed queries read back as the same tree.
            if let Expr::Literal(serde_json::Value::Number(n)) = &inner {
                if let Some(f) = n.as_f64() {
                    return Ok(Expr::Literal(number(-f)));
                }
            }
            return Ok(Expr::Unary(UnaryOp::Neg, Box::new(inner)));
        }
        self.primary(depth)
    }

    fn primary(&mut self, depth: usize) -> Result<Expr, SqlError> {
        let Some(token) = self.next() else {
            return Err(SqlError::new(
                "expected an expression, found the end of the query",
            ));
        };
        let expr = match token {
            Token::Num(n) => Expr::Literal(number(n)),
            Token::Str(s) => Expr::Literal(serde_json::Value::String(s)),
            Token::Param(name) => Expr::Param(name),
            Token::Symbol("(") => {
                let inner = self.expr(depth)?;
                self.expect_symbol(")")?;
                inner
            }
            Token::Symbol("[") => {
                let mut items = Vec::new();
                if !self.eat_symbol("]") {
                    loop {
                        items.push(self.expr(depth)?);
                        if self.eat_symbol("]") {
                            break;
                        }
                        self.expect_symbol(",")?;
                    }
                }
                Expr::Array(items)
            }
            Token::Symbol("{") => {
                let mut fields: Vec<(String, Expr)> = Vec::new();
                if !self.eat_symbol("}") {
                    loop {
                        let name = match self.next() {
                            Some(Token::Ident(name) | Token::Str(name)) => name,
                            _ => {
                                return Err(SqlError::new(
                                    "expected a property name in an object constructor",
                                ))
                            }
                        };
                        if fields.iter().any(|(existing, _)| *existing == name) {
                            return Err(SqlError::new(format!(
                                "property '{name}' appears twice in an object constructor"
                            )));
                        }
                        self.expect_symbol(":")?;
                        fields.push((name, self.expr(depth)?));
                        if self.eat_symbol("}") {
                            break;
                        }
                        self.expect_symbol(",")?;
                    }
                }
                Expr::Object(fields)
            }
            Token::Ident(word) => {
                let upper = word.to_ascii_uppercase();
                match upper.as_str() {
                    "TRUE" => Expr::Literal(serde_json::Value::Bool(true)),
                    "FALSE" => Expr::Literal(serde_json::Value::Bool(false)),
                    "NULL" => Expr::Literal(serde_json::Value::Null),
                    "UNDEFINED" => Expr::Undefined,
                    _ if self.eat_symbol("(") => return self.call(&word, depth),
                    _ if RESERVED.contains(&upper.as_str()) => {
                        return Err(SqlError::new(format!(
                            "expected an expression, found keyword '{word}'"
                        )))
                    }
                    _ => Expr::Path(vec![PathStep::Field(word)]),
                }
            }
            other => {
                return Err(SqlError::new(format!(
                    "expected an expression, found {}",
                    describe(&other)
                )))
            }
        };
        self.postfix(expr, depth)
    }

    /// Property access after a primary: `.name` and `[expr]`.
    fn postfix(&mut self, mut expr: Expr, depth: usize) -> Result<Expr, SqlError> {
        loop {
            let step = if self.eat_symbol(".") {
                match self.next() {
                    Some(Token::Ident(name)) => PathStep::Field(name),
                    _ => return Err(SqlError::new("expected a property name after '.'")),
                }
            } else if self.eat_symbol("[") {
                let index = self.expr(depth)?;
                self.expect_symbol("]")?;
                match index {
                    Expr::Literal(serde_json::Value::String(name)) => PathStep::Field(name),
                    other => PathStep::Index(Box::new(other)),
                }
            } else {
                return Ok(expr);
            };
            match &mut expr {
                Expr::Path(steps) => steps.push(step),
                _ => {
                    return Err(SqlError::new(
                        "property access is only supported on the FROM alias",
                    ))
                }
            }
        }
    }

    fn call(&mut self, name: &str, depth: usize) -> Result<Expr, SqlError> {
        let mut args = Vec::new();
        if !self.eat_symbol(")") {
            loop {
                if self.eat_symbol("*") {
                    args.push(Expr::Literal(serde_json::Value::from(1)));
                } else {
                    args.push(self.expr(depth)?);
                }
                if self.eat_symbol(")") {
                    break;
                }
                self.expect_symbol(",")?;
            }
        }
        let upper = name.to_ascii_uppercase();
        let aggregate = match upper.as_str() {
            "COUNT" => Some(Aggregate::Count),
            "SUM" => Some(Aggregate::Sum),
            "MIN" => Some(Aggregate::Min),
            "MAX" => Some(Aggregate::Max),
            "AVG" => Some(Aggregate::Avg),
            _ => None,
        };
        if let Some(aggregate) = aggregate {
            let [arg] = <[Expr; 1]>::try_from(args)
                .map_err(|_| SqlError::new(format!("{upper} takes exactly one argument")))?;
            return Ok(Expr::Aggregate(aggregate, Box::new(arg)));
        }
        let (function, arity) = match upper.as_str() {
            "IS_DEFINED" => (Function::IsDefined, 1..=1),
            "IS_NULL" => (Function::IsNull, 1..=1),
            "STARTSWITH" => (Function::StartsWith, 2..=3),
            "CONTAINS" => (Function::Contains, 2..=3),
            "ARRAY_CONTAINS" => (Function::ArrayContains, 2..=3),
            "LOWER" => (Function::Lower, 1..=1),
            "UPPER" => (Function::Upper, 1..=1),
            "LENGTH" => (Function::Length, 1..=1),
            "ABS" => (Function::Abs, 1..=1),
            _ => {
                return Err(SqlError::new(format!(
                    "function {name} is not supported by this emulator"
                )))
            }
        };
        if !arity.contains(&args.len()) {
            return Err(SqlError::new(format!(
                "{upper} takes {} argument(s), got {}",
                arity.start(),
                args.len()
            )));
        }
        Ok(Expr::Call(function, args))
    }
}

/// `first` alone, or the chain of it and `rest`.
fn chain(first: Expr, rest: Vec<(BinaryOp, Expr)>) -> Expr {
    if rest.is_empty() {
        first
    } else {
        Expr::Chain(Box::new(first), rest)
    }
}

fn number(n: f64) -> serde_json::Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        serde_json::Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null)
    }
}

/// Cosmos names an unaliased projection after its last path step, else `$1`, `$2`, …
fn default_name(expr: &Expr, position: usize) -> String {
    match expr {
        Expr::Path(steps) if steps.len() > 1 => match steps.last() {
            Some(PathStep::Field(name)) => name.clone(),
            _ => format!("${}", position + 1),
        },
        _ => format!("${}", position + 1),
    }
}

impl Query {
    /// Resolves paths against the FROM alias: `c.x` becomes a path `["x"]`, `c`
    /// becomes [`Expr::Root`]; any other root identifier is an error.
    fn bind_alias(mut self) -> Result<Query, SqlError> {
        let alias = self.alias.clone();
        self.projection
            .exprs_mut()
            .chain(&mut self.filter)
            .chain(&mut self.group_by)
            .chain(self.order_by.iter_mut().map(|(expr, _)| expr))
            .try_for_each(|expr| bind_expr(expr, &alias))?;
        Ok(self)
    }
}

fn bind_expr(expr: &mut Expr, alias: &str) -> Result<(), SqlError> {
    if let Expr::Path(steps) = expr {
        let root = match steps.first() {
            Some(PathStep::Field(name)) => name.clone(),
            _ => {
                return Err(SqlError::new(
                    "a property path must start with the FROM alias",
                ))
            }
        };
        if root != alias {
            return Err(SqlError::new(format!(
                "identifier '{root}' could not be resolved (the FROM alias is '{alias}')"
            )));
        }
        steps.remove(0);
        if steps.is_empty() {
            *expr = Expr::Root;
            return Ok(());
        }
    }
    expr.try_for_each_child_mut(&mut |child| bind_expr(child, alias))
}
