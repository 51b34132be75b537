//! Expression evaluation with Cosmos semantics: a missing property is *undefined*,
//! comparisons across types are undefined, and `WHERE` keeps only documents for which
//! the filter is exactly `true`.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;

use serde_json::Value;

use super::memory::{check_value, json_bytes};
use super::parser::{Aggregate, BinaryOp, Expr, Function, PathStep, UnaryOp};
use super::SqlError;

/// The value of an expression: `None` is Cosmos's *undefined*.
pub type Eval<'a> = Option<Cow<'a, Value>>;

pub type Params = HashMap<String, Value>;

pub fn eval<'a>(expr: &'a Expr, doc: &'a Value, params: &'a Params) -> Result<Eval<'a>, SqlError> {
    Ok(match expr {
        Expr::Literal(value) => Some(Cow::Borrowed(value)),
        Expr::Undefined => None,
        Expr::Param(name) => params.get(name).map(Cow::Borrowed),
        Expr::Root => Some(Cow::Borrowed(doc)),
        Expr::Path(steps) => resolve_path(doc, steps, params)?,
        Expr::Unary(UnaryOp::Not, inner) => match eval(inner, doc, params)?.as_deref() {
            Some(Value::Bool(b)) => Some(Cow::Owned(Value::Bool(!b))),
            _ => None,
        },
        Expr::Unary(UnaryOp::Neg, inner) => match eval(inner, doc, params)?.as_deref() {
            Some(Value::Number(n)) => n.as_f64().map(|f| Cow::Owned(number(-f))),
            _ => None,
        },
        Expr::Binary(op, left, right) => {
            combine(*op, eval(left, doc, params)?, right, doc, params)?
        }
        Expr::Chain(first, rest) => {
            let mut value = eval(first, doc, params)?;
            for (op, operand) in rest {
                value = combine(*op, value, operand, doc, params)?;
            }
            value
        }
        Expr::In {
            needle,
            list,
            negated,
        } => {
            let Some(needle) = eval(needle, doc, params)? else {
                return Ok(None);
            };
            let mut found = false;
            for item in list {
                if let Some(item) = eval(item, doc, params)? {
                    if equals(&needle, &item) == Some(true) {
                        found = true;
                        break;
                    }
                }
            }
            Some(Cow::Owned(Value::Bool(found != *negated)))
        }
        Expr::Between(value, low, high) => {
            let value = eval(value, doc, params)?;
            let low = eval(low, doc, params)?;
            let high = eval(high, doc, params)?;
            match (value, low, high) {
                (Some(v), Some(l), Some(h)) => match (compare(&v, &l), compare(&v, &h)) {
                    (Some(a), Some(b)) => Some(Cow::Owned(Value::Bool(
                        a != Ordering::Less && b != Ordering::Greater,
                    ))),
                    _ => None,
                },
                _ => None,
            }
        }
        Expr::Call(function, args) => call(*function, args, doc, params)?,
        Expr::Aggregate(..) => {
            return Err(SqlError::new(
                "aggregate functions are only allowed in the SELECT list",
            ))
        }
        Expr::Array(items) => {
            let mut values = Vec::with_capacity(items.len());
            let mut bytes = 2;
            for item in items {
                if let Some(value) = eval(item, doc, params)? {
                    bytes += json_bytes(&value) + 1;
                    check_value(bytes)?;
                    values.push(value.into_owned());
                }
            }
            Some(Cow::Owned(Value::Array(values)))
        }
        Expr::Object(fields) => Some(Cow::Owned(object(fields, doc, params)?)),
    })
}

/// An object of `fields` evaluated on `doc`, leaving out the undefined ones: an object
/// constructor, and the row of `SELECT a, b`.
pub fn object(fields: &[(String, Expr)], doc: &Value, params: &Params) -> Result<Value, SqlError> {
    let mut object = serde_json::Map::with_capacity(fields.len());
    let mut bytes = 2;
    for (name, value) in fields {
        if let Some(value) = eval(value, doc, params)? {
            bytes += name.len() + 4 + json_bytes(&value);
            check_value(bytes)?;
            object.insert(name.clone(), value.into_owned());
        }
    }
    Ok(Value::Object(object))
}

/// True when `filter` evaluates to exactly `true` for `doc`.
pub fn matches(filter: &Expr, doc: &Value, params: &Params) -> Result<bool, SqlError> {
    Ok(matches!(
        eval(filter, doc, params)?.as_deref(),
        Some(Value::Bool(true))
    ))
}

fn resolve_path<'a>(
    doc: &'a Value,
    steps: &'a [PathStep],
    params: &'a Params,
) -> Result<Eval<'a>, SqlError> {
    let mut current = doc;
    for step in steps {
        let next = match step {
            PathStep::Field(name) => current.get(name.as_str()),
            PathStep::Index(index) => match eval(index, doc, params)?.as_deref() {
                Some(Value::Number(n)) => n
                    .as_u64()
                    .and_then(|i| usize::try_from(i).ok())
                    .and_then(|i| current.get(i)),
                Some(Value::String(name)) => current.get(name.as_str()),
                _ => None,
            },
        };
        match next {
            Some(value) => current = value,
            None => return Ok(None),
        }
    }
    Ok(Some(Cow::Borrowed(current)))
}

/// `l op right`, evaluating `right` only when `l` does not decide the result.
fn combine<'a>(
    op: BinaryOp,
    l: Eval<'a>,
    right: &'a Expr,
    doc: &'a Value,
    params: &'a Params,
) -> Result<Eval<'a>, SqlError> {
    // AND/OR short-circuit on a decisive left side, as Cosmos does.
    match (op, l.as_deref()) {
        (BinaryOp::And, Some(Value::Bool(false))) => return Ok(Some(boolean(false))),
        (BinaryOp::Or, Some(Value::Bool(true))) => return Ok(Some(boolean(true))),
        _ => {}
    }
    let r = eval(right, doc, params)?;
    let (l, r) = (l.as_deref(), r.as_deref());
    Ok(match op {
        BinaryOp::And => match (l, r) {
            (_, Some(Value::Bool(false))) => Some(boolean(false)),
            (Some(Value::Bool(true)), Some(Value::Bool(true))) => Some(boolean(true)),
            _ => None,
        },
        BinaryOp::Or => match (l, r) {
            (_, Some(Value::Bool(true))) => Some(boolean(true)),
            (Some(Value::Bool(false)), Some(Value::Bool(false))) => Some(boolean(false)),
            _ => None,
        },
        BinaryOp::Eq | BinaryOp::Ne => match (l, r) {
            (Some(a), Some(b)) => equals(a, b).map(|eq| boolean(eq == (op == BinaryOp::Eq))),
            _ => None,
        },
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => match (l, r) {
            (Some(a), Some(b)) => compare(a, b).map(|ord| {
                boolean(match op {
                    BinaryOp::Lt => ord == Ordering::Less,
                    BinaryOp::Le => ord != Ordering::Greater,
                    BinaryOp::Gt => ord == Ordering::Greater,
                    _ => ord != Ordering::Less,
                })
            }),
            _ => None,
        },
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => {
            match (l.and_then(Value::as_f64), r.and_then(Value::as_f64)) {
                (Some(a), Some(b)) => {
                    let result = match op {
                        BinaryOp::Add => a + b,
                        BinaryOp::Sub => a - b,
                        BinaryOp::Mul => a * b,
                        _ => a / b,
                    };
                    result.is_finite().then(|| Cow::Owned(number(result)))
                }
                _ => None,
            }
        }
        BinaryOp::Concat => match (l, r) {
            (Some(Value::String(a)), Some(Value::String(b))) => {
                check_value(a.len() + b.len() + 2)?;
                Some(Cow::Owned(Value::String(format!("{a}{b}"))))
            }
            _ => None,
        },
    })
}

fn call<'a>(
    function: Function,
    args: &'a [Expr],
    doc: &'a Value,
    params: &'a Params,
) -> Result<Eval<'a>, SqlError> {
    let mut values = Vec::with_capacity(args.len());
    for arg in args {
        values.push(eval(arg, doc, params)?);
    }
    let arg = |i: usize| values.get(i).and_then(|v| v.as_deref());
    let ignore_case = matches!(arg(2), Some(Value::Bool(true)));
    Ok(match function {
        Function::IsDefined => Some(boolean(arg(0).is_some())),
        Function::IsNull => Some(boolean(matches!(arg(0), Some(Value::Null)))),
        Function::StartsWith | Function::Contains => match (arg(0), arg(1)) {
            (Some(Value::String(s)), Some(Value::String(p))) => {
                let (s, p) = if ignore_case {
                    (Cow::Owned(s.to_lowercase()), Cow::Owned(p.to_lowercase()))
                } else {
                    (Cow::Borrowed(s.as_str()), Cow::Borrowed(p.as_str()))
                };
                Some(boolean(if function == Function::StartsWith {
                    s.starts_with(p.as_ref())
                } else {
                    s.contains(p.as_ref())
                }))
            }
            _ => None,
        },
        Function::ArrayContains => match (arg(0), arg(1)) {
            (Some(Value::Array(items)), Some(needle)) => {
                let partial = ignore_case;
                Some(boolean(items.iter().any(|item| {
                    if partial {
                        partial_match(item, needle)
                    } else {
                        equals(item, needle) == Some(true)
                    }
                })))
            }
            _ => None,
        },
        Function::Lower | Function::Upper => match arg(0) {
            Some(Value::String(s)) => {
                Some(Cow::Owned(Value::String(if function == Function::Lower {
                    s.to_lowercase()
                } else {
                    s.to_uppercase()
                })))
            }
            _ => None,
        },
        Function::Length => match arg(0) {
            Some(Value::String(s)) => Some(Cow::Owned(Value::from(s.chars().count()))),
            _ => None,
        },
        Function::Abs => arg(0)
            .and_then(Value::as_f64)
            .map(|f| Cow::Owned(number(f.abs()))),
    })
}

/// `ARRAY_CONTAINS(arr, obj, true)`: every property of `needle` equals the item's.
fn partial_match(item: &Value, needle: &Value) -> bool {
    match (item, needle) {
        (Value::Object(item), Value::Object(needle)) => needle
            .iter()
            .all(|(k, v)| item.get(k).is_some_and(|iv| equals(iv, v) == Some(true))),
        _ => equals(item, needle) == Some(true),
    }
}

fn boolean(b: bool) -> Cow<'static, Value> {
    Cow::Owned(Value::Bool(b))
}

pub fn number(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Value::from(f as i64)
    } else {
        serde_json::Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    }
}

/// Equality with Cosmos rules: values of different types are not comparable (undefined).
pub fn equals(a: &Value, b: &Value) -> Option<bool> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => Some(x.as_f64() == y.as_f64()),
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(false);
            }
            for (p, q) in x.iter().zip(y) {
                if equals(p, q) != Some(true) {
                    return Some(false);
                }
            }
            Some(true)
        }
        (Value::Object(x), Value::Object(y)) => Some(
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| equals(v, w) == Some(true))),
        ),
        _ if type_rank(a) == type_rank(b) => Some(a == b),
        _ => None,
    }
}

/// Ordering for `<`, `>`, … : defined only for two numbers, two strings, two booleans or two nulls.
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        (Value::Null, Value::Null) => Some(Ordering::Equal),
        _ => None,
    }
}

/// Cosmos's order across types, for `ORDER BY`, `MIN` and `MAX`: undefined < null <
/// booleans < numbers < strings < arrays < objects; within a type, by value (arrays and
/// objects tie).
pub fn sort_order(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => type_rank(a)
            .cmp(&type_rank(b))
            .then_with(|| compare(a, b).unwrap_or(Ordering::Equal)),
    }
}

fn type_rank(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Number(_) => 2,
        Value::String(_) => 3,
        Value::Array(_) => 4,
        Value::Object(_) => 5,
    }
}

/// Running state of one aggregate over the documents of a partition.
#[derive(Debug, Clone)]
pub struct Accumulator {
    kind: Aggregate,
    count: u64,
    sum: f64,
    /// Set when SUM/AVG meets a defined non-number: the result becomes undefined.
    poisoned: bool,
    extreme: Option<Value>,
}

impl Accumulator {
    pub fn new(kind: Aggregate) -> Self {
        Self {
            kind,
            count: 0,
            sum: 0.0,
            poisoned: false,
            extreme: None,
        }
    }

    pub fn add(&mut self, value: Option<&Value>) {
        let Some(value) = value else { return };
        match self.kind {
            Aggregate::Count => self.count += 1,
            Aggregate::Sum | Aggregate::Avg => match value.as_f64() {
                Some(f) => {
                    self.sum += f;
                    self.count += 1;
                }
                None => self.poisoned = true,
            },
            Aggregate::Min | Aggregate::Max => {
                if matches!(value, Value::Array(_) | Value::Object(_)) {
                    return;
                }
                let replace = match &self.extreme {
                    None => true,
                    Some(current) => {
                        let ord = sort_order(Some(value), Some(current));
                        if self.kind == Aggregate::Min {
                            ord == Ordering::Less
                        } else {
                            ord == Ordering::Greater
                        }
                    }
                };
                if replace {
                    self.extreme = Some(value.clone());
                }
            }
        }
    }

    pub fn finish(&self) -> Option<Value> {
        match self.kind {
            Aggregate::Count => Some(Value::from(self.count)),
            Aggregate::Sum if !self.poisoned => Some(number(self.sum)),
            Aggregate::Avg if !self.poisoned && self.count > 0 => {
                Some(number(self.sum / self.count as f64))
            }
            Aggregate::Min | Aggregate::Max => self.extreme.clone(),
            _ => None,
        }
    }
}
