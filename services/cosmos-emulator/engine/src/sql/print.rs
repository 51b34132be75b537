//! Expressions back to SQL text, for the query plan: its ORDER BY expressions and the
//! rewritten query each partition runs. The text parses back to the same tree, with
//! parentheses only where precedence needs them, so it nests no deeper than the query
//! it came from and stays within the parser's depth limit.

use std::fmt::Write;

use super::parser::{Aggregate, BinaryOp, Expr, Function, PathStep, UnaryOp};

impl Expr {
    /// This expression as SQL, with paths rooted at `alias`.
    pub fn to_sql(&self, alias: &str) -> String {
        let mut out = String::new();
        write_expr(self, alias, &mut out);
        out
    }

    /// As [`Expr::to_sql`], parenthesised if needed to be an operand of `AND`.
    pub fn to_sql_in_and(&self, alias: &str) -> String {
        let mut out = String::new();
        write_operand(self, level(BinaryOp::And) + 1, alias, &mut out);
        out
    }
}

/// Binding strength, loosest first, as the parser's descent reads them.
const NOT: u8 = 3;
const COMPARISON: u8 = 4;
const ADDITIVE: u8 = 5;
const UNARY: u8 = 7;
const ATOM: u8 = 8;

fn level(op: BinaryOp) -> u8 {
    match op {
        BinaryOp::Or => 1,
        BinaryOp::And => 2,
        BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
            COMPARISON
        }
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Concat => ADDITIVE,
        BinaryOp::Mul | BinaryOp::Div => 6,
    }
}

fn precedence(expr: &Expr) -> u8 {
    match expr {
        Expr::Chain(_, rest) => rest.first().map_or(ATOM, |(op, _)| level(*op)),
        Expr::Binary(..) | Expr::In { .. } | Expr::Between(..) => COMPARISON,
        Expr::Unary(UnaryOp::Not, _) => NOT,
        Expr::Unary(UnaryOp::Neg, _) => UNARY,
        // `-3` is read as a negated 3 (then folded back into the literal).
        Expr::Literal(serde_json::Value::Number(n)) if n.as_f64().is_some_and(|f| f < 0.0) => UNARY,
        _ => ATOM,
    }
}

/// `expr` where the grammar expects an operand binding at least as tightly as `min`.
fn write_operand(expr: &Expr, min: u8, alias: &str, out: &mut String) {
    if precedence(expr) < min {
        out.push('(');
        write_expr(expr, alias, out);
        out.push(')');
    } else {
        write_expr(expr, alias, out);
    }
}

fn write_expr(expr: &Expr, alias: &str, out: &mut String) {
    match expr {
        Expr::Literal(value) => out.push_str(&value.to_string()),
        Expr::Undefined => out.push_str("undefined"),
        Expr::Param(name) => out.push_str(name),
        Expr::Root => out.push_str(alias),
        Expr::Path(steps) => {
            out.push_str(alias);
            for step in steps {
                match step {
                    PathStep::Field(name) if is_identifier(name) => {
                        out.push('.');
                        out.push_str(name);
                    }
                    PathStep::Field(name) => {
                        out.push('[');
                        out.push_str(&serde_json::Value::from(name.as_str()).to_string());
                        out.push(']');
                    }
                    PathStep::Index(index) => {
                        out.push('[');
                        write_expr(index, alias, out);
                        out.push(']');
                    }
                }
            }
        }
        Expr::Unary(UnaryOp::Not, inner) => {
            out.push_str("NOT ");
            write_operand(inner, NOT, alias, out);
        }
        Expr::Unary(UnaryOp::Neg, inner) => {
            // The space keeps `- -x` from reading as a `--` comment.
            out.push_str("- ");
            write_operand(inner, UNARY, alias, out);
        }
        Expr::Binary(op, left, right) => {
            write_operand(left, ADDITIVE, alias, out);
            let _ = write!(out, " {} ", operator(*op));
            write_operand(right, ADDITIVE, alias, out);
        }
        Expr::Chain(first, rest) => {
            let min = precedence(expr) + 1;
            write_operand(first, min, alias, out);
            for (op, operand) in rest {
                let _ = write!(out, " {} ", operator(*op));
                write_operand(operand, min, alias, out);
            }
        }
        Expr::In {
            needle,
            list,
            negated,
        } => {
            write_operand(needle, ADDITIVE, alias, out);
            out.push_str(if *negated { " NOT IN (" } else { " IN (" });
            write_list(list.iter(), alias, out);
            out.push(')');
        }
        Expr::Between(value, low, high) => {
            write_operand(value, ADDITIVE, alias, out);
            out.push_str(" BETWEEN ");
            write_operand(low, ADDITIVE, alias, out);
            out.push_str(" AND ");
            write_operand(high, ADDITIVE, alias, out);
        }
        Expr::Call(function, args) => {
            out.push_str(function_name(*function));
            out.push('(');
            write_list(args.iter(), alias, out);
            out.push(')');
        }
        Expr::Aggregate(aggregate, arg) => {
            out.push_str(aggregate_name(*aggregate));
            out.push('(');
            write_expr(arg, alias, out);
            out.push(')');
        }
        Expr::Array(items) => {
            out.push('[');
            write_list(items.iter(), alias, out);
            out.push(']');
        }
        Expr::Object(fields) => write_object(
            fields.iter().map(|(name, value)| (name.as_str(), value)),
            alias,
            out,
        ),
    }
}

fn write_list<'a>(items: impl Iterator<Item = &'a Expr>, alias: &str, out: &mut String) {
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_expr(item, alias, out);
    }
}

/// `{"name": expr, …}`; names are written as JSON strings, which any name can be.
pub fn write_object<'a>(
    fields: impl Iterator<Item = (&'a str, &'a Expr)>,
    alias: &str,
    out: &mut String,
) {
    out.push('{');
    for (i, (name, value)) in fields.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&serde_json::Value::from(name).to_string());
        out.push_str(": ");
        write_expr(value, alias, out);
    }
    out.push('}');
}

/// A name the lexer reads as one identifier (and the parser accepts after a `.`).
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn operator(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Or => "OR",
        BinaryOp::And => "AND",
        BinaryOp::Eq => "=",
        BinaryOp::Ne => "!=",
        BinaryOp::Lt => "<",
        BinaryOp::Le => "<=",
        BinaryOp::Gt => ">",
        BinaryOp::Ge => ">=",
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        BinaryOp::Concat => "||",
    }
}

pub fn aggregate_name(aggregate: Aggregate) -> &'static str {
    match aggregate {
        Aggregate::Count => "COUNT",
        Aggregate::Sum => "SUM",
        Aggregate::Min => "MIN",
        Aggregate::Max => "MAX",
        Aggregate::Avg => "AVG",
    }
}

fn function_name(function: Function) -> &'static str {
    match function {
        Function::IsDefined => "IS_DEFINED",
        Function::IsNull => "IS_NULL",
        Function::StartsWith => "STARTSWITH",
        Function::Contains => "CONTAINS",
        Function::ArrayContains => "ARRAY_CONTAINS",
        Function::Lower => "LOWER",
        Function::Upper => "UPPER",
        Function::Length => "LENGTH",
        Function::Abs => "ABS",
    }
}
